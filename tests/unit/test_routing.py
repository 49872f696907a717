from bamboo.extraction.panda.routing import bucket_continuous, pseudonymise, route_task_data

KEY = b"k"


def test_discrete_continuous_split_rule_and_status():
    clues = route_task_data({"status": "broken", "errorDialog": "reason=InsufficientMemory x", "coreCount": 8,
                             "processingType": "reco", "ramCount": 2500, "walltime": 30000,
                             "splitRule": "nG=1, mF=1,bad", "jediTaskID": 1}, KEY)
    names = {n.name for n in clues.features + clues.context_features + clues.symptoms}
    assert {"coreCount=8", "processingType=reco", "ramCount=2500-3000MB", "walltime=6-12h", "splitRule:nG=1",
            "splitRule:mF=1", "TaskStatusBroken", "InsufficientMemory"} <= names
    assert not any(n.startswith("jediTaskID") for n in names), "ids are not features"
    assert any(f.name == "processingType=reco" for f in clues.context_features)


def test_bad_continuous_value_is_reported_not_guessed():
    clues = route_task_data({"ramCount": "lots"}, KEY)
    assert clues.features == [] and "ramCount" in clues.skipped[0]


def test_buckets_are_stable_at_edges():
    assert bucket_continuous("ramCount", 2048) == "2000-2500MB"
    assert bucket_continuous("ramCount", 64000) == ">16000MB"


def test_memory_requests_a_scout_overshoot_apart_fall_in_different_buckets():
    # 1500 and 2000 MB were one "1-2GB" clue, so a too-low request and a sufficient one looked alike
    assert bucket_continuous("ramCount", 1500) != bucket_continuous("ramCount", 2000)


def test_the_pilot_error_code_of_the_dialog_and_of_failed_jobs_are_clues():
    # The symptom class groups many pilot codes (1212 and 1235 are both InsufficientMemory); the code itself
    # tells causes of one class apart, so it is a feature, from the dialog and from the task's job records.
    clues = route_task_data({"errorDialog": "pilot:1386 PanDA queue is not online",
                             "failedJobs": [{"pilotErrorCode": 1213, "computingSite": "CERN-PROD"},
                                            {"pilotErrorCode": 1386, "computingSite": "CERN-PROD"},
                                            {"pilotErrorCode": 0, "computingSite": " "}, "junk"]}, KEY)
    names = [f.name for f in clues.features]
    assert names.count("pilotErrorCode=1386") == 1 and "pilotErrorCode=1213" in names
    assert "computingSite=CERN-PROD" in names and "pilotErrorCode=0" not in names


def test_the_peak_memory_the_dialog_reports_is_a_clue():
    # Issue 30: two causes of one memory error class differ in what the payload used; the task's ramCount may
    # be missing or changed since, the pilot's maxPSS in the dialog is what the jobs ran into.
    def features(dialog: str) -> list[str]:
        return [f.name for f in route_task_data({"errorDialog": dialog}, KEY).features if f.name.startswith("maxPSS")]

    assert features("pilot:1305 Failed to execute payload: maxPSS=5000 MB exceeded") == ["maxPSS=4000-6000MB"]
    assert features("scouts failed reason=InsufficientMemory (maxPSS 2300 MB, requested 2000 MB)") == ["maxPSS=2000-2500MB"]
    assert features("pilot:1212 maxpss: 17500MB, then maxPSS=900 MB") == ["maxPSS=>16000MB"], "the first one"
    assert features("pilot:1212 Payload ran out of memory") == [] and features("maxPSS=-5 MB") == []
    assert features("x" * 2000 + " maxPSS=5000 MB") == [], "only the start of a long dialog is read"
    routed = route_task_data({"errorDialog": "pilot:1305 maxPSS=5000 MB exceeded"}, KEY)
    peak = next(f for f in routed.features if f.name.startswith("maxPSS"))
    assert peak.props["raw"] == 5000 and peak.props["source"] == "errorDialog"


def test_retries_and_the_share_of_failed_jobs_are_clues():
    names = {f.name for f in route_task_data({"retryID": 3, "nJobs": 10, "nJobsFailed": 10}, KEY).features}
    assert {"retryID=2+", "failedJobs=all"} <= names
    names = {f.name for f in route_task_data({"retryID": 0, "nJobs": 200, "nJobsFailed": 5}, KEY).features}
    assert {"retryID=0", "failedJobs=few"} <= names
    assert not route_task_data({"retryID": "x", "nJobs": 0, "nJobsFailed": 0}, KEY).features
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
