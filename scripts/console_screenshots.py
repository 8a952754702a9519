#!/usr/bin/env python3
"""The live console's screenshots in the documentation (docs/images/console-*.png), taken
in Debian's headless Chromium across real labs (root), every flow and change made from the
page itself:

- console-portfolio.png: the portfolio with a TCP flow from h1 to h4 under way, the
  selected link's chart beside it;
- console-droptail.png, console-fq_codel.png: bufferbloat on a 20 Mbit/s link with a
  1000-packet queue, a CUBIC flow and a ping across it, under drop-tail and then with the
  link's discipline set to fq_codel from the page;
- console-failover.png: wan's preferred peering P13 taken down under a TCP flow and a ping,
  the routers' own BGP lines on the timeline and the ping's RTT moving to the transit path.

    sudo python3 scripts/console_screenshots.py [portfolio|bufferbloat|failover ...]
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from selenium import webdriver

ROOT = Path(__file__).resolve().parent.parent
SIMPLEPERF = [sys.executable, "-m", "simpleperf"]
IMAGES = ROOT / "docs" / "images"
PORT = "8391"


def lab(*args: str) -> None:
    subprocess.run([*SIMPLEPERF, "lab", *args], check=True, capture_output=True, timeout=180)


@contextmanager
def watching(name: str, *up: str) -> Iterator[Any]:
    """Lab `name` up, the console and Chromium on it; all of it ended afterwards."""
    lab("up", name, *up)
    console = subprocess.Popen([*SIMPLEPERF, "lab", "web", "--port", PORT],
                               stdout=subprocess.PIPE, text=True)
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "chromium"
    for argument in ("--headless=new", "--no-sandbox", "--window-size=1400,1250"):
        options.add_argument(argument)
    browser = webdriver.Chrome(options=options, service=webdriver.ChromeService(
        shutil.which("chromedriver") or "chromedriver"))
    try:
        assert console.stdout is not None
        address = re.search(r"http://\S+", console.stdout.readline())
        assert address, "lab web printed no address"
        browser.get(address[0])
        wait(browser, "const s = window.simpleperfConsole; return s && s.drawn")
        yield browser
    finally:
        browser.quit()
        console.terminate()
        console.wait(30)
        lab("down", name)


def wait(browser: Any, script: str, seconds: float = 30.0) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = browser.execute_script(script)
        if value:
            return value
        time.sleep(0.3)
    raise SystemExit(f"the page never showed: {script}")


def start(browser: Any, flow: dict[str, Any]) -> int:
    """A flow started from the page; its number."""
    started = browser.execute_script(
        f"return window.simpleperfConsole.startFlow({json.dumps(flow)})")
    if not started:
        raise SystemExit(f"the page refused {flow}: "
                         f"{browser.execute_script('return window.simpleperfConsole.lastFlow')}")
    return int(started["id"])


def shoot(browser: Any, name: str) -> None:
    IMAGES.mkdir(exist_ok=True)
    browser.save_screenshot(str(IMAGES / name))
    print(f"wrote {IMAGES / name}")


def portfolio() -> None:
    with watching("portfolio") as browser:
        start(browser, {"kind": "tcp", "from": "h1", "to": "h4", "duration": "40s"})
        time.sleep(4)
        busiest = browser.execute_script(
            "const s = window.simpleperfConsole.series; let best = null, most = -1;"
            "for (const [name, x] of Object.entries(s)) { const v = x.ab[x.ab.length - 1] "
            "|| 0; if (v > most) { most = v; best = name; } } return best;")
        browser.execute_script(f"window.simpleperfConsole.select('{busiest}')")
        time.sleep(8)
        shoot(browser, "console-portfolio.png")


def bufferbloat() -> None:
    with watching("pair", "--rate", "20M", "--delay", "10ms", "--queue", "1000") as browser:
        start(browser, {"kind": "tcp", "from": "h1", "to": "h2", "duration": "90s",
                        "congestion": "cubic"})
        ping = start(browser, {"kind": "ping", "from": "h1", "to": "h2", "duration": "90s"})
        browser.execute_script(f"window.simpleperfConsole.chartedFlow = {ping}")
        browser.execute_script("window.simpleperfConsole.select('h1-h2')")
        time.sleep(20)
        shoot(browser, "console-droptail.png")
        browser.execute_script("window.simpleperfConsole.act({action: 'set', set: "
                               "{qdisc: 'fq_codel'}})")
        wait(browser, "const a = window.simpleperfConsole.lastAction; return a && a.ok")
        time.sleep(20)
        shoot(browser, "console-fq_codel.png")


def failover() -> None:
    with watching("wan") as browser:
        start(browser, {"kind": "tcp", "from": "h1", "to": "h3", "duration": "60s"})
        ping = start(browser, {"kind": "ping", "from": "h2", "to": "h4", "duration": "60s"})
        browser.execute_script(f"window.simpleperfConsole.chartedFlow = {ping}")
        time.sleep(10)
        browser.execute_script("window.simpleperfConsole.select('P13')")
        browser.execute_script("window.simpleperfConsole.act({action: 'down'})")
        wait(browser, "return window.simpleperfConsole.timeline.some(e => "
                      "e.includes('(after link P13 down)'))", 60.0)
        time.sleep(10)
        browser.execute_script("window.simpleperfConsole.select('P12')")
        time.sleep(2)
        shoot(browser, "console-failover.png")


SHOTS: dict[str, Callable[[], None]] = {"portfolio": portfolio, "bufferbloat": bufferbloat,
                                        "failover": failover}


def main() -> None:
    wanted = sys.argv[1:] or list(SHOTS)
    unknown = [name for name in wanted if name not in SHOTS]
    if unknown:
        raise SystemExit(f"no screenshot named {unknown[0]}: one of {', '.join(SHOTS)}")
    for name in wanted:
        SHOTS[name]()


if __name__ == "__main__":
    main()
