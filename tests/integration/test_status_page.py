"""``/status`` in headless Chromium, with the examples served beside a version that fails.

The page must render every model, show the failed version's reason, update by itself after
traffic (its script refreshes it; the test never reloads), raise no console error and fit a
phone's width. Screenshots are saved to the artifacts folder.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from tests.conftest import REPO_ROOT, LiveServer, launch, stop
from tests.integration._browser import artifacts_dir, chromium

pytestmark = pytest.mark.integration
__all__ = ["chromium"]  # the fixture, imported for pytest

EXAMPLES = REPO_ROOT / "examples"
FIXTURE = REPO_ROOT / "tests" / "fixtures" / "service"


def _config(root: Path, worker: str) -> Path:
    """breast-cancer (canary split and a shadow) and digits from the examples, and the
    fixture's scorer, whose version 3 fails to load."""
    examples = yaml.safe_load((EXAMPLES / "servinglib.yaml").read_text())
    models = [m for m in examples["models"] if m["name"] in ("breast-cancer", "digits")]
    for example in ("breast-cancer", "digits-classifier"):
        shutil.copytree(EXAMPLES / example / "models", root / example / "models")
    shutil.copytree(FIXTURE / "models" / "scorer", root / "fixture" / "scorer")
    fixture = yaml.safe_load((FIXTURE / "servinglib.yaml").read_text())
    scorer = next(m for m in fixture["models"] if m["name"] == "scorer")
    scorer.update({"class": "fixture/scorer/model.py:ScorerModel", "repository": "fixture/scorer"})
    config = {
        "service": "status-page-test",
        "server": {"worker": worker, "workers": 2, "threads": 4},
        "models": [*models, scorer],
    }
    path = root / "servinglib.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    root = tmp_path_factory.mktemp("status")
    server = launch(_config(root, "asyncio"), root)
    yield server
    stop(server.process)


def _wait(condition: Callable[[], Any], what: str, timeout_s: float = 60) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.2)


def _text(driver: Any, xpath: str) -> str:
    """The text of the first node at ``xpath``, read in one step: the page's refresh may
    replace the node between a find and a read."""
    text: str = driver.execute_script(
        "var n = document.evaluate(arguments[0], document, null,"
        " XPathResult.FIRST_ORDERED_NODE_TYPE, null).singleNodeValue;"
        " return n === null ? '' : n.innerText;",
        xpath,
    )
    return text


def _row(model: str, version: str) -> str:
    return f"//section[h2='{model}']//tbody/tr[th='{version}']"


def _requests_cell(driver: Any, model: str, version: str) -> int:
    text = _text(driver, _row(model, version) + "/td[last()]")
    return int(text) if text.isdigit() else -1


def _severe(driver: Any) -> list[dict[str, Any]]:
    return [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def test_the_status_page_in_chromium(served: LiveServer, chromium: Any) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    driver = chromium
    driver.set_window_size(1280, 1000)
    driver.get(f"{served.url}/status?refresh=1")
    assert driver.title == "status-page-test: servinglib status"
    headings = [h.text for h in driver.find_elements(By.TAG_NAME, "h2")]
    assert headings == ["breast-cancer", "digits", "scorer"]

    # The failed version: its state and the reason it failed, in its own row.
    row = _text(driver, _row("scorer", "3"))
    assert "FAILED" in row
    assert "weights are corrupt (on purpose)" in row
    assert "passed (2/2)" in _text(driver, _row("scorer", "2"))
    # The canary split and the shadow of the breast-cancer example.
    section = _text(driver, "//section[h2='breast-cancer']")
    assert "version 2: 90 %" in section
    assert "version 1: 10 %" in section
    before = _requests_cell(driver, "digits", "2")
    assert before == 0

    # Traffic, then the page updates by itself (no reload).
    body = (EXAMPLES / "digits-classifier" / "request.json").read_bytes()
    for _ in range(20):
        answer = requests.post(
            f"{served.url}/infer",
            data=body,
            headers={"Content-Type": "application/json"},
            timeout=30,
        )
        assert answer.status_code == 200, answer.text
    cancer = (EXAMPLES / "breast-cancer" / "request.json").read_bytes()
    for _ in range(10):
        answer = requests.post(
            f"{served.url}/infer",
            data=cancer,
            headers={"Content-Type": "application/json", "x-routing-key": "status"},
            timeout=30,
        )
        assert answer.status_code == 200, answer.text
    _wait(lambda: _requests_cell(driver, "digits", "2") >= 20, "the page to show 20 requests")
    _wait(
        lambda: "n/a agreement" not in _text(driver, "//section[h2='breast-cancer']/ul"),
        "the shadow's agreement",
    )
    _wait(
        lambda: driver.execute_script(
            "return document.querySelectorAll('#status svg.spark').length"
        ),
        "a sparkline of the request rate",
    )
    refreshed = driver.find_element(By.ID, "refresh-note").text
    assert refreshed.startswith("Updated"), refreshed
    driver.save_screenshot(str(artifacts_dir() / "status-desktop.png"))

    # Keyboard: the first focusable control is the Pause button, and it toggles.
    driver.find_element(By.TAG_NAME, "body").send_keys(Keys.TAB)
    focused = driver.switch_to.active_element
    assert focused.get_attribute("id") == "pause"
    focused.send_keys(Keys.ENTER)
    assert focused.get_attribute("aria-pressed") == "true"
    focused.send_keys(Keys.ENTER)
    assert focused.get_attribute("aria-pressed") == "false"

    # A phone's width: no sideways scrolling of the page (tables scroll in their box).
    driver.set_window_size(390, 844)
    driver.refresh()
    width = driver.execute_script(
        "return [document.documentElement.scrollWidth, window.innerWidth]"
    )
    assert width[0] <= width[1] + 1, width
    driver.save_screenshot(str(artifacts_dir() / "status-phone.png"))
    assert _severe(driver) == []


def test_status_json_and_the_off_switch(served: LiveServer, tmp_path: Path) -> None:
    answer = requests.get(f"{served.url}/status.json", timeout=30)
    assert answer.status_code == 200
    models = {m["name"]: m for m in answer.json()["models"]}
    failed = {v["version"]: v for v in models["scorer"]["versions"]}
    assert failed["3"]["state"] == "FAILED"
    assert failed["4"]["reason"].startswith("self-test 'wrong expectation' failed")
    assert models["breast-cancer"]["traffic_split"] == {"2": 90, "1": 10}
    page = requests.get(f"{served.url}/status", timeout=30)
    assert "default-src 'self'" in page.headers["Content-Security-Policy"]
    assert str(tmp_path.parent) not in page.text  # no absolute path of the config leaks


def test_the_gthread_worker_serves_the_page(tmp_path: Path) -> None:
    server = launch(_config(tmp_path, "gthread"), tmp_path)
    try:
        page = requests.get(f"{server.url}/status", timeout=30)
        assert page.status_code == 200
        assert "weights are corrupt (on purpose)" in page.text
    finally:
        stop(server.process)
