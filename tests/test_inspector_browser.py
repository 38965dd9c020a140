"""The inspector page in a real browser: Debian's chromium driven by selenium through chromium-driver.

A live server, a session with three calls (one of them a failure), then /ui in headless Chromium: the three
calls are listed, and the rectangle drawn for the selected call sits where `box_original` falls on the image
as displayed. Then the README's own serve command (every address, no keys): a released session is listed among
the finished ones, and opens with its calls and images. Screenshots are saved (INSPECTOR_SCREENSHOT, and
INSPECTOR_SCREENSHOT_FINISHED, else the test's temporary directory). CI installs the two packages (.ci/run);
without them the test is skipped here, with the reason.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import httpx
import pytest

from tests.conftest import b64, photo, start_server, stop_server

pytestmark = pytest.mark.browser
CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")


def browser():
    if not (CHROMIUM and DRIVER):
        if os.environ.get("CI"):
            pytest.fail("chromium and chromium-driver are not installed; .ci/run installs them")
        pytest.skip("the browser test needs Debian's chromium and chromium-driver (apt-get install chromium "
                    "chromium-driver)")
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
                 "--no-first-run", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--window-size=1400,1000"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(DRIVER), options=options)


@pytest.fixture
def keyed_server(tmp_path: Path):
    server = start_server({"TOOLSERVER_DATA_DIR": str(tmp_path / "data"), "TOOLSERVER_API_KEYS": '["inspector-key"]',
                           "TOOLSERVER_SR_MODEL_DIR": str(tmp_path / "no-weights")}, timeout=60)
    yield server
    stop_server(server)


def make_rollout(url: str, key: str | None = "inspector-key") -> tuple[str, list[int]]:
    auth = {"Authorization": f"Bearer {key}"} if key else {}
    with httpx.Client(base_url=url, headers=auth, timeout=60) as http:
        picture = b64(photo("TwoWings.jpg").read_bytes())
        sid = http.post("/v1/sessions", json={"images": [{"data": picture}], "texts": ["One. Two. Three."]}).json()[
            "session_id"]
        zoom = http.post(f"/v1/sessions/{sid}/tools/zoom_in", json={"image": 0, "bbox_2d": [200, 150, 650, 700]})
        bad = http.post(f"/v1/sessions/{sid}/tools/zoom_in", json={"image": 0, "bbox_2d": [900, 0, 100, 100]})
        check = http.post(f"/v1/sessions/{sid}/tools/check_whether_response_sentence_number_in_range",
                          json={"response": "text_0", "lower_bound": 1, "upper_bound": 5})
        assert zoom.json()["ok"] and not bad.json()["ok"] and check.json()["ok"]
        return sid, zoom.json()["meta"]["box_original"]


def test_the_inspector_lists_the_calls_and_draws_the_box(keyed_server, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ready
    from selenium.webdriver.support.ui import WebDriverWait

    sid, box = make_rollout(keyed_server.url)
    driver = browser()
    try:
        driver.get(f"{keyed_server.url}/ui#{sid}")
        wait = WebDriverWait(driver, 20)
        # With API keys configured the page asks for one (and sends it as a bearer header, not in a URL).
        key_input = wait.until(ready.visibility_of_element_located((By.ID, "key")))
        key_input.send_keys("inspector-key")
        driver.find_element(By.CSS_SELECTOR, "#key-form button").click()
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#calls li")) == 3)
        items = driver.find_elements(By.CSS_SELECTOR, "#calls li")
        assert [i.find_element(By.CLASS_NAME, "tool").text for i in items] == [
            "zoom_in", "zoom_in", "check_whether_response_sentence_number_in_range"]
        assert "error" in items[1].get_attribute("class") and "invalid_box" in items[1].text
        # The session list (it needs the key) shows this session.
        wait.until(lambda d: any(sid[:12] in row.text for row in d.find_elements(By.CSS_SELECTOR, "#session-table tr")))
        # The first call is selected: its box on the source image, its crop beside it.
        items[0].click()
        wait.until(lambda d: d.find_element(By.ID, "box").is_displayed())
        wait.until(lambda d: d.execute_script("const i = document.getElementById('result-img');"
                                              "return i.complete && i.naturalWidth > 0;"))
        geometry = driver.execute_script("""
            const img = document.getElementById('source-img').getBoundingClientRect();
            const box = document.getElementById('box').getBoundingClientRect();
            const style = getComputedStyle(document.getElementById('box'));
            const border = parseFloat(style.borderLeftWidth);
            return {img: [img.left, img.top, img.width, img.height],
                    box: [box.left, box.top, box.width, box.height], border: border};""")
        from PIL import Image

        width, height = Image.open(photo("TwoWings.jpg")).size
        left, top, shown_w, shown_h = geometry["img"]
        sx, sy = shown_w / width, shown_h / height
        expected = [left + box[0] * sx, top + box[1] * sy, (box[2] - box[0]) * sx, (box[3] - box[1]) * sy]
        # The box element's border box: the rectangle itself (the image has a 1-px border: allow 2 px).
        assert geometry["box"] == pytest.approx(expected, abs=2.5), (geometry, expected)
        shot = Path(os.environ.get("INSPECTOR_SCREENSHOT", tmp_path / "inspector.png"))
        shot.parent.mkdir(parents=True, exist_ok=True)
        assert driver.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
    finally:
        driver.quit()


@pytest.fixture
def open_server(tmp_path: Path):
    """`toolserver serve --host 0.0.0.0` without keys, as the README starts it."""
    server = start_server({"TOOLSERVER_DATA_DIR": str(tmp_path / "data"), "TOOLSERVER_HOST": "0.0.0.0",
                           "TOOLSERVER_SR_MODEL_DIR": str(tmp_path / "no-weights")}, timeout=60)
    yield server
    stop_server(server)


def test_a_finished_session_is_listed_and_opens_on_an_open_server(open_server, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    sid, _ = make_rollout(open_server.url, key=None)
    live = make_rollout(open_server.url, key=None)[0]
    assert httpx.delete(f"{open_server.url}/v1/sessions/{sid}").status_code == 204
    driver = browser()
    try:
        driver.get(f"{open_server.url}/ui")
        wait = WebDriverWait(driver, 20)
        # This machine's browser sees both lists: the live session, and the released one among the finished.
        wait.until(lambda d: any(live[:12] in r.text for r in d.find_elements(By.CSS_SELECTOR, "#session-table tr")))
        row = wait.until(lambda d: next((r for r in d.find_elements(By.CSS_SELECTOR, "#finished-table tbody tr")
                                         if sid[:12] in r.text), None))
        assert "released" in row.text
        outcome = Select(driver.find_element(By.ID, "filter-outcome"))
        outcome.select_by_value("expired")  # a filter that leaves it out
        wait.until(lambda d: not any(sid[:12] in r.text for r in d.find_elements(By.CSS_SELECTOR, "#finished-table tr")))
        outcome.select_by_value("released")
        row = wait.until(lambda d: next((r for r in d.find_elements(By.CSS_SELECTOR, "#finished-table tbody tr")
                                         if sid[:12] in r.text), None))
        row.find_element(By.TAG_NAME, "a").click()
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#calls li")) == 3)
        assert "finished (released" in driver.find_element(By.ID, "session-title").text
        items = driver.find_elements(By.CSS_SELECTOR, "#calls li")
        assert "error" in items[1].get_attribute("class") and "invalid_box" in items[1].text
        items[0].click()
        wait.until(lambda d: d.find_element(By.ID, "box").is_displayed())
        wait.until(lambda d: d.execute_script(
            "return [...document.querySelectorAll('#images img, #result-img')]"
            ".every((i) => i.complete && i.naturalWidth > 0);"))
        assert len(driver.find_elements(By.CSS_SELECTOR, "#images img")) == 2
        shot = Path(os.environ.get("INSPECTOR_SCREENSHOT_FINISHED", tmp_path / "inspector-finished.png"))
        shot.parent.mkdir(parents=True, exist_ok=True)
        assert driver.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
    finally:
        driver.quit()
