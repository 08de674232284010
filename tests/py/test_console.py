"""The web console in a real browser: headless Chromium (Debian's `chromium` + `chromium-driver`)
driven by Selenium against `codespace serve --http`. An operator signs in, sees a hold appear
while an agent waits on it (the queue reloads itself), grants it and the agent's call completes;
the same with a deny; a grant whose form lost its CSRF token is refused; a non-operator sees no
queue. With CODESPACE_CONSOLE_SCREENSHOTS=DIR it saves a screenshot of each page there (how
docs/console/*.png are made).

Skips (fails under CI=true or CODESPACE_REQUIRE_ISOLATION=1) when chromium or its driver is
missing.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from mcp import ClientSession
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

from codespace_helpers import error_body, skip_missing
from test_http import binary

AGENT = "browser-agent-token-0123456789"
OPERATOR = "browser-operator-token-0123456789"
VIEWER = "browser-viewer-token-0123456789"
XSS = "<script>document.title='pwned'</script><img src=x onerror=\"document.title='pwned'\">"
WAIT = 60


def chromium() -> tuple[str, str] | None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver") or shutil.which("chromium-driver")
    if not browser or not driver:
        return None
    return browser, driver


class Server:
    """`serve --http` with a confirm workspace; clients agent, op (the operator) and viewer."""

    def __init__(self, tmp: Path):
        ws = tmp / "ws"
        ws.mkdir()
        (ws / "notes.txt").write_text("one\ntwo\n")
        cfg = {
            "workspaces": {"main": {"root": str(ws), "profile": "workspace-write",
                                    "approvals": "confirm", "sandbox": "off",
                                    "secret_masking": "off"}},
            "store": str(tmp / "store.db"),
            "clients": {"agent": {"token": AGENT}, "op": {"token": OPERATOR},
                        "viewer": {"token": VIEWER}},
            "console": {"operators": ["op"]},
        }
        (tmp / "config.json").write_text(json.dumps(cfg))
        self.log_path = tmp / "server.log"
        self.log = open(self.log_path, "w")
        env = dict(os.environ, CODESPACE_LOG="info")
        env.pop("CODESPACE_CONFIG", None)
        self.proc = subprocess.Popen(
            [binary(), "serve", "--config", str(tmp / "config.json"), "--http", "127.0.0.1:0"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self.log, env=env)
        deadline = time.monotonic() + 60
        self.base = None
        while time.monotonic() < deadline and self.proc.poll() is None:
            m = re.search(r"http://(127\.0\.0\.1:\d+)/mcp", self.log_path.read_text())
            if m:
                self.base = "http://" + m.group(1)
                break
            time.sleep(0.05)
        assert self.base, self.log_path.read_text()

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=20)
        self.log.close()


class Agent(threading.Thread):
    """An MCP client that runs a held command and waits for the hold: it calls
    `operation_resume` until the answer is no longer APPROVAL_REQUIRED."""

    def __init__(self, server: Server, command: list[str] | None = None,
                 patch: str | None = None):
        super().__init__(daemon=True)
        self.server = server
        if patch is not None:
            self.tool, self.args = "apply_patch", {"workspace_id": "main", "patch": patch}
        else:
            self.tool, self.args = "exec_command", {"workspace_id": "main", "command": command,
                                                    "yield_ms": 10000}
        self.held = threading.Event()
        self.approval_id: str | None = None
        self.outcome: dict | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            asyncio.run(self.body())
        except BaseException as e:  # reported by the test
            self.error = e
            self.held.set()

    async def body(self) -> None:
        client = create_mcp_http_client(headers={"Authorization": f"Bearer {AGENT}"})
        async with client:
            async with streamable_http_client(self.server.base + "/mcp", http_client=client) as (r, w):
                async with ClientSession(r, w) as s:
                    await s.initialize()
                    res = await s.call_tool(self.tool, self.args)
                    body = error_body(res)
                    assert body["code"] == "APPROVAL_REQUIRED", body
                    self.approval_id = body["approval_id"]
                    self.held.set()
                    deadline = time.monotonic() + WAIT
                    while time.monotonic() < deadline:
                        res = await s.call_tool("operation_resume",
                                                {"approval_id": self.approval_id})
                        if res.is_error:
                            b = error_body(res)
                            if b["code"] == "APPROVAL_REQUIRED":
                                await asyncio.sleep(0.2)
                                continue
                            self.outcome = {"error": b}
                        else:
                            self.outcome = {"ok": res.structured_content}
                        return
                    self.outcome = {"error": {"code": "TIMEOUT"}}


@pytest.fixture
def browser():
    found = chromium()
    if not found:
        skip_missing("test_console", "chromium and chromium-driver are not installed "
                     "(apt-get install chromium chromium-driver)")
        pytest.skip("no chromium")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = found[0]
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
              "--window-size=1280,900"):
        opts.add_argument(a)
    d = webdriver.Chrome(service=Service(found[1]), options=opts)
    yield d
    d.quit()


@pytest.fixture
def server(tmp_path):
    s = Server(tmp_path)
    yield s
    s.stop()


def shoot(d, name: str) -> None:
    out = os.environ.get("CODESPACE_CONSOLE_SCREENSHOTS")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        d.save_screenshot(str(Path(out) / f"{name}.png"))


def sign_in(d, server: Server, token: str) -> None:
    from selenium.webdriver.common.by import By

    d.delete_all_cookies()
    d.get(server.base + "/console/sign-in")
    d.find_element(By.NAME, "token").send_keys(token)
    submit(d, d.find_element(By.CSS_SELECTOR, "form.signin button"))


def submit(d, button) -> None:
    """Clicks a form's button and waits until the browser has replaced the page with the
    answer (the click itself returns before the navigation ends)."""
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    old = d.find_element(By.TAG_NAME, "html")
    button.click()

    def replaced(_d) -> bool:
        # Chromium reports a node of the replaced document either as stale or, while the new
        # one is being built, as an inspector error ("does not belong to the document"): both
        # mean the old page is gone.
        try:
            old.is_enabled()
            return False
        except WebDriverException:
            return True

    WebDriverWait(d, WAIT).until(replaced)
    WebDriverWait(d, WAIT).until(lambda d: d.execute_script("return document.readyState")
                                 == "complete")


def wait_for_hold(d, approval_id: str):
    """The queue reloads itself: wait, without touching the page, until the hold is listed."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(d, WAIT).until(ec.presence_of_element_located((By.ID, f"hold-{approval_id}")))
    # Found: stop the reloads so a click never lands on a page being replaced.
    d.execute_script("document.querySelectorAll('meta[http-equiv]').forEach(m => m.remove());")
    return d.find_element(By.ID, f"hold-{approval_id}")


def test_a_hold_appears_is_granted_in_the_browser_and_the_agents_call_completes(browser, server):
    from selenium.webdriver.common.by import By

    sign_in(browser, server, OPERATOR)
    assert browser.current_url.endswith("/console/approvals")
    shoot(browser, "sign-in-queue-empty")
    agent = Agent(server, ["echo", "granted-in-chromium", XSS])
    agent.start()
    assert agent.held.wait(WAIT) and agent.error is None, agent.error
    patcher = Agent(server, patch="*** Begin Patch\n*** Update File: notes.txt\n one\n-two\n"
                                  "+two, reviewed\n+three\n*** End Patch\n")
    patcher.start()
    assert patcher.held.wait(WAIT) and patcher.error is None, patcher.error
    wait_for_hold(browser, patcher.approval_id)
    browser.refresh()
    hold = wait_for_hold(browser, agent.approval_id)
    patch = browser.find_element(By.ID, f"hold-{patcher.approval_id}")
    assert "+two, reviewed" in patch.find_element(By.CSS_SELECTOR, "pre.diff").text
    assert "notes.txt" in patch.find_element(By.CSS_SELECTOR, "table.versions").text
    # The attacker's markup is text: no script ran, no image element exists.
    assert XSS.split(">")[0] in hold.find_element(By.CSS_SELECTOR, "pre.command").text
    assert browser.title != "pwned"
    assert not hold.find_elements(By.CSS_SELECTOR, "img")
    shoot(browser, "approvals")
    browser.set_window_size(1280, 1400)
    shoot(browser, "approvals")
    browser.set_window_size(1280, 900)
    submit(browser, hold.find_element(By.CSS_SELECTOR, "button.grant"))
    agent.join(WAIT)
    assert agent.outcome and "ok" in agent.outcome, agent.outcome
    out = agent.outcome["ok"]["exec_command"]
    assert out["state"] == "exited" and "granted-in-chromium" in out["chunk"], out
    assert not browser.find_elements(By.ID, f"hold-{agent.approval_id}")
    patch = wait_for_hold(browser, patcher.approval_id)
    submit(browser, patch.find_element(By.CSS_SELECTOR, "button.grant"))
    patcher.join(WAIT)
    assert patcher.outcome and "ok" in patcher.outcome, patcher.outcome
    # The other pages, for the record (the chart is drawn by the embedded script).
    browser.get(server.base + "/console/decisions")
    assert browser.find_elements(By.CSS_SELECTOR, "#chart svg rect"), "the chart is drawn"
    shoot(browser, "decisions")
    submit(browser, browser.find_element(By.CSS_SELECTOR, "table.rows td a"))
    assert "Explanation" in browser.page_source
    shoot(browser, "decision")
    browser.get(server.base + "/console/policies")
    assert "workspace-write.permit.approval-answer" in browser.page_source
    shoot(browser, "policies")
    browser.get(server.base + "/console/processes")
    shoot(browser, "processes")


def test_a_deny_in_the_browser_refuses_the_agents_call(browser, server):
    from selenium.webdriver.common.by import By

    sign_in(browser, server, OPERATOR)
    agent = Agent(server, ["echo", "denied-in-chromium"])
    agent.start()
    assert agent.held.wait(WAIT) and agent.error is None, agent.error
    hold = wait_for_hold(browser, agent.approval_id)
    submit(browser, hold.find_element(By.CSS_SELECTOR, "button.deny"))
    agent.join(WAIT)
    err = (agent.outcome or {}).get("error", {})
    assert err.get("code") == "APPROVAL_CONFLICT" and "denied" in err.get("message", ""), \
        agent.outcome


def test_a_grant_without_the_csrf_token_is_refused(browser, server):
    from selenium.webdriver.common.by import By

    sign_in(browser, server, OPERATOR)
    agent = Agent(server, ["echo", "csrf"])
    agent.start()
    assert agent.held.wait(WAIT) and agent.error is None, agent.error
    from selenium.common.exceptions import WebDriverException

    # Strip the token from the grant form and submit it. The queue reloads itself every 3 s; a
    # reload between finding the hold and the click makes the element stale: find it again.
    for attempt in range(5):
        hold = wait_for_hold(browser, agent.approval_id)
        try:
            browser.execute_script(
                "document.querySelectorAll('input[name=csrf]').forEach(i => i.remove());")
            submit(browser, hold.find_element(By.CSS_SELECTOR, "button.grant"))
            break
        except WebDriverException:
            if attempt == 4:
                raise
            browser.get(server.base + "/console/approvals")
    assert "CSRF token is missing or wrong" in browser.page_source
    shoot(browser, "csrf-refused")
    browser.get(server.base + "/console/approvals")
    # Still pending; let the agent finish: deny with the token.
    hold = wait_for_hold(browser, agent.approval_id)
    submit(browser, hold.find_element(By.CSS_SELECTOR, "button.deny"))
    agent.join(WAIT)


def test_a_non_operator_sees_no_queue(browser, server):
    from selenium.webdriver.common.by import By

    agent = Agent(server, ["echo", "viewer"])
    agent.start()
    assert agent.held.wait(WAIT) and agent.error is None, agent.error
    sign_in(browser, server, VIEWER)
    assert "Not an operator" in browser.page_source
    assert agent.approval_id not in browser.page_source
    assert not browser.find_elements(By.CSS_SELECTOR, "section.hold")
    shoot(browser, "not-an-operator")
    # Let the agent finish: the operator denies.
    sign_in(browser, server, OPERATOR)
    hold = wait_for_hold(browser, agent.approval_id)
    submit(browser, hold.find_element(By.CSS_SELECTOR, "button.deny"))
    agent.join(WAIT)
