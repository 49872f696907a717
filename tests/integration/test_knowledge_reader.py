"""What `bamboo mcp serve` answers by default comes from the populated store."""


from bamboo.mcp.knowledge_reader import PgKnowledgeReader
from tests.conftest import EXAMPLES
from tests.integration.helpers import populate


async def test_reader_answers_from_populated_examples(client, running_worker, services, settings):
    result = await populate(client, EXAMPLES)
    assert result.failed == 0
    reader = PgKnowledgeReader(settings, store=services.store, embedder=services.embedder)
    procs = await reader.procedures_for_cause("Insufficient memory request", 5)
    assert procs and procs[0].times_used >= 1 and len(procs[0].steps) >= 2
    # scripted embeddings are hash vectors: an exact symptom text finds its own incident first
    import json
    inc = json.loads(sorted(EXAMPLES.glob("*.json"))[0].read_text())
    from bamboo.extraction.panda.routing import strip_html

    causes = await reader.causes_for_symptom(strip_html(inc["task_data"]["errorDialog"]), 3)
    assert causes[0].cause == inc["expected"]["cause"] and causes[0].score > 0.99
    similar = await reader.similar_incidents(strip_html(inc["task_data"]["errorDialog"]), 3)
    assert similar[0].incident_id == inc["incident_id"] and similar[0].cause == inc["expected"]["cause"]
