"""Where the repository's own files are: resources, prompt templates, schemas (one place for each)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RESOURCES = REPO / "resources"
PROMPTS = RESOURCES / "prompts"
SCHEMA = REPO / "schemas" / "config.schema.yaml"
