from bamboo.extraction.generic import GenericLLMExtractionStrategy
from bamboo.models.incident import Incident


def test_generic_strategy_routes_any_system_fields():
    hints = GenericLLMExtractionStrategy(llm=None).prefetch_hints(
        Incident(incident_id="x", task_data={"status": "failed", "error": "Database timeout after 30s", "region": "eu"}))
    assert hints["symptoms"] == ["DatabaseTimeoutAfterS", "TaskStatusFailed"]
    assert "region=eu" in hints["features"]
