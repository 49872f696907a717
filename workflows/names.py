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
