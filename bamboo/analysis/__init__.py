"""Diagnosing a problem task from the knowledge base read-only (docs/architecture.md).

clues.py (same routing as accumulation) → queries.py (read-only SQL) → ranking.py → retrieval.py →
diagnosis.py (LLM, candidates as an enum) / ranked.py (deterministic) → exploration.py and procedures.py
(what the trust policy lets run in the automatic phase) → email.py; feedback.py is the one writer.
The AnalyzeTask / BatchAnalyze workflows drive these steps through activities/analyze.py.
"""
