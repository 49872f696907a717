-- Every signed statement now says when it was signed (policy.signing.Authorization.issued_at), so a revocation
-- covers the answers of its term signed before `through` (the revocation's time plus the clock skew a signer may
-- have), whatever lifetime each was signed with; it used to cover answers expiring before it.
COMMENT ON COLUMN revoked_grants.through IS
    'answers of the term signed before this time are revoked (policy.grants.grant_is_revoked)';
