"""Diagnosing a problem task from the knowledge base (seed 001, ReasoningNavigator), read-only.

clues.py (same routing as accumulation) → queries.py (read-only SQL) → ranking.py → retrieval.py →
diagnosis.py (LLM, candidates as an enum) / ranked.py (deterministic) → exploration.py and procedures.py
(what the trust policy lets run in the automatic phase) → email.py; feedback.py is the one writer.
The AnalyzeTask / BatchAnalyze workflows drive these steps through activities/analyze.py.
"""
