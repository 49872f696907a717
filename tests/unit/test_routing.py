from bamboo.extraction.panda.routing import bucket_continuous, pseudonymise, route_task_data

KEY = b"k"


def test_discrete_continuous_split_rule_and_status():
    clues = route_task_data({"status": "broken", "errorDialog": "reason=InsufficientMemory x", "coreCount": 8,
                             "processingType": "reco", "ramCount": 2500, "walltime": 30000,
                             "splitRule": "nG=1, mF=1,bad", "jediTaskID": 1}, KEY)
    names = {n.name for n in clues.features + clues.context_features + clues.symptoms}
    assert {"coreCount=8", "processingType=reco", "ramCount=2-3GB", "walltime=6-12h", "splitRule:nG=1",
            "splitRule:mF=1", "TaskStatusBroken", "InsufficientMemory"} <= names
    assert not any(n.startswith("jediTaskID") for n in names), "ids are not features"
    assert any(f.name == "processingType=reco" for f in clues.context_features)


def test_bad_continuous_value_is_reported_not_guessed():
    clues = route_task_data({"ramCount": "lots"}, KEY)
    assert clues.features == [] and "ramCount" in clues.skipped[0]


def test_buckets_are_stable_at_edges():
    assert bucket_continuous("ramCount", 2048) == "2-3GB"
    assert bucket_continuous("ramCount", 64000) == ">16GB"
    assert bucket_continuous("walltime", -1) is None


def test_user_identity_is_keyed_pseudonym():
    a = route_task_data({"userName": "Jane Doe"}, KEY).features[0].name
    assert a.startswith("user=user-") and "Jane" not in a
    assert pseudonymise("jane doe", KEY) == pseudonymise("Jane Doe ", KEY)
    assert pseudonymise("Jane Doe", b"other") != pseudonymise("Jane Doe", KEY)


def test_canonical_rewording_must_stay_a_short_label_with_the_same_words():
    from bamboo.extraction.panda.strategy import accept_canonical

    assert accept_canonical("Storage endpoint unavailable", "Storage endpoint down") == "Storage endpoint down"
    assert accept_canonical("Storage endpoint unavailable",
                            "The server is unable to retrieve data from the storage endpoint") == "Storage endpoint unavailable"
    assert accept_canonical("Insufficient memory request", "Disk quota exceeded") == "Insufficient memory request"
    assert accept_canonical("Insufficient memory request", "") == "Insufficient memory request"
    # a re-wording that reverses the meaning keeps the record's wording
    assert accept_canonical("Renew the VOMS proxy and retry",
                            "Retry the task after expiration of the proxy") == "Renew the VOMS proxy and retry"
    assert accept_canonical("Group stage-out failures by site", "Group stage-in failures by site") == \
        "Group stage-out failures by site"
    site = "Transfers to the destination fail at the storage element of BNL-OSG2_DATADISK after the token rotation"
    assert accept_canonical(site, site) == site  # not cut at 80 characters: the site distinguishes it
