"""Workflow, activity and queue names are compatibility data: a rename would orphan running
histories, so they live in one place and a test pins them."""

ACCUMULATE_WORKFLOW = "AccumulateIncident"
POPULATE_WORKFLOW = "PopulateBatch"

LOAD_INCIDENT = "load_incident"
EXTRACT_INCIDENT = "extract_incident"
REVIEW_EXTRACTION = "review_extraction"
STORE_GRAPH = "store_graph"
LIST_INCIDENT_SOURCES = "list_incident_sources"
READ_INCIDENT_SOURCES = "read_incident_sources"
PLAN_REVIEW_EXPLORATION = "plan_review_exploration"
ACCUMULATE_CHUNK = "accumulate_chunk"
LOAD_PRIOR_ATTEMPT = "load_prior_attempt"
# Sent by a lane activity to its own batch run when its LLM work is over and only commits are left.
LANE_RELEASED_SIGNAL = "lane_released"
# Sent by a lane activity every few seconds with what it has settled so far.
LANE_PROGRESS_SIGNAL = "lane_progress"
# Updates a claiming lane sends its batch run: the next slice, please; this slice is finished.
CLAIM_SLICE_UPDATE = "claim_slice"
SLICE_DONE_UPDATE = "slice_done"
# What a lane's retried attempt asks its batch run: the slices it holds and has not reported.
HELD_SLICES_QUERY = "held_slices"

ANALYZE_WORKFLOW = "AnalyzeTask"
BATCH_ANALYZE_WORKFLOW = "BatchAnalyze"

ANALYSIS_GATHER_EVIDENCE = "analysis_gather_evidence"
ANALYSIS_DIAGNOSE = "analysis_diagnose"
ANALYSIS_PLAN_EXPLORATION = "analysis_plan_exploration"
ANALYSIS_PROCEDURE_PLAN = "analysis_procedure_plan"
ANALYSIS_EMAIL = "analysis_email"
ANALYSIS_LIST_TASKS = "analysis_list_tasks"
ANALYSIS_READ_TASKS = "analysis_read_tasks"

INVESTIGATION_WORKFLOW = "Investigation"
INVESTIGATION_INTENT = "investigation_intent"
INVESTIGATION_CODEGEN = "investigation_codegen"
INVESTIGATION_SUMMARY = "investigation_summary"
INVESTIGATION_POLICY_CONTEXT = "investigation_policy_context"
INVESTIGATION_AUDIT = "investigation_audit"
INVESTIGATION_GRANT = "investigation_grant"
INVESTIGATION_REVOKE_GRANTS = "investigation_revoke_grants"
INVESTIGATION_FINALIZE = "investigation_finalize"
EXECUTE_CODE = "execute_code"
