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
