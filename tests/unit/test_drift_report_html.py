"""The drift report page escapes every value it shows (Jinja2 autoescape)."""

from __future__ import annotations

from servinglib.drift_offline.report import _html

HOSTILE = '<script>alert("x")</script>'


def test_every_field_of_the_report_page_is_escaped() -> None:
    field = {
        "role": "feature",
        "name": HOSTILE,
        "kind": "<b>numeric</b>",
        "samples": 3,
        "psi": 0.5,
        "js_distance": None,
        "drifted": True,
        "quality": {"<i>missing</i>": 2, "out_of_range": 0},
    }
    result = {
        "model": "m&<x>",
        "version": "1",
        "requests": 3,
        "drift_threshold": 0.25,
        "window": {"since_seconds": 3600.0},
        "fields": [field],
    }
    page = _html(result, {HOSTILE: 'feature-"x".png'})
    assert "<script>" not in page
    assert "<b>" not in page
    assert "<i>" not in page
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in page
    assert "Drift of m&amp;&lt;x&gt; version 1" in page
    assert 'src="feature-&#34;x&#34;.png"' in page
    assert "&lt;i&gt;missing&lt;/i&gt; 2" in page
    assert "<td>0.5000</td><td>-</td><td>DRIFTED</td>" in page.replace("\n", "")
    assert "in the last 3600 s" in page
