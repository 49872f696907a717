"""Analysis settings read from the environment with the project's BAMBOO_ prefix.

Kept beside the analysis (the shared Settings model is a contract other modules own); the starter of
an analysis reads it and passes the values in the workflow input, so workflows stay deterministic.
"""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class AnalysisConfig(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="BAMBOO_", env_file=".env", extra="ignore")

    exploratory_investigation_threshold: float = Field(
        default=0.5, ge=0.0, le=1.0,
        description="Below this diagnosis confidence an exploratory read-only investigation runs")
