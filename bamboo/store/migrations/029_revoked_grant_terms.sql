-- A revocation covers every answer of its term signed no later than the revoked one (policy.grants.revocation_of):
-- the approver's other auto-run answers naming the same procedure and code stay valid, and a requester who wrote
-- one of them into the row revived the grant. `through`: answers of the term expiring before it are revoked.
ALTER TABLE revoked_grants ADD COLUMN through timestamptz;
CREATE INDEX revoked_grants_term ON revoked_grants (term);
