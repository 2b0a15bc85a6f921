"""docs/history-recipes.md shows the recipes' code verbatim (no Spark needed)."""

from __future__ import annotations

import inspect
from pathlib import Path

from routing_lib import history_recipes as hr

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "history-recipes.md"


def test_recipe_blocks_are_up_to_date():
    text = DOC.read_text()
    assert hr.sync_doc(text) == text, (
        "run: .venv/bin/python -m routing_lib.history_recipes --sync-doc docs/history-recipes.md"
    )


def test_doc_shows_every_sql_text_and_function():
    text = DOC.read_text()
    for recipe in hr.RECIPES:
        assert f"```sql\n{recipe.sql}```" in text, recipe.sql_name
        assert inspect.getsource(recipe.function) in text, recipe.name
        # a warehouse's tables, or the derived topic_route_history's view (spark_sql adds it)
        assert "{warehouse}" in recipe.sql or "FROM topic_route_history" in recipe.sql
    for helper in hr.HELPERS:
        assert inspect.getsource(helper) in text


def test_sync_doc_fills_empty_blocks(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("intro\n<!-- recipe:cluster_sizes -->\nstale\n<!-- /recipe -->\nend\n")
    assert hr.main(["--sync-doc", str(page)]) == 0
    text = page.read_text()
    assert hr.CLUSTER_SIZES_SQL in text and "stale" not in text
    assert text.startswith("intro\n") and text.endswith("<!-- /recipe -->\nend\n")


def test_readme_links_the_docs():
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Route history for analysts", 1)[1]
    assert "docs/history-recipes.md" in section and "docs/housekeeping.md" in section
