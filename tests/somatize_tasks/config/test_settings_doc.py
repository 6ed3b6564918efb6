"""docs/settings.md is the page rendered from ``Settings``: no setting goes undocumented."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import Field

from somatize_tasks.config.settings import Settings
from somatize_tasks.config.settings_doc import REGENERATE, env_name, render

PAGE = Path(__file__).resolve().parents[3] / "docs" / "settings.md"


def test_the_settings_page_is_the_rendered_one() -> None:
    assert PAGE.read_text() == render(), (
        "docs/settings.md is not what somatize_tasks/config/settings.py renders "
        f"(a setting added, removed or changed?); regenerate it with: {REGENERATE}"
    )


def test_every_setting_has_a_row_under_its_environment_name() -> None:
    page = render()
    for name in Settings.model_fields:
        assert f"| `{env_name(name)}` |" in page


def test_a_setting_without_a_description_is_refused() -> None:
    class Undocumented(Settings):
        brand_new_knob: int = Field(default=1)

    with pytest.raises(ValueError, match=r"'brand_new_knob' has no description.*settings_doc"):
        render(Undocumented)


def test_a_field_docstring_is_its_description() -> None:
    class Documented(Settings):
        brand_new_knob: int = 1
        """How far the new knob turns."""

    row = "| `SOMATIZE_BRAND_NEW_KNOB` | int | `1` | How far the new knob turns. |"
    assert row in render(Documented)
