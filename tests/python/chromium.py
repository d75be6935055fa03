"""Opens a page in Debian's headless Chromium and reports what a reader would see: console
errors, uncaught exceptions, failed loads and every image's natural size. Talks the DevTools
protocol over a pipe (--remote-debugging-pipe: commands on fd 3, replies on fd 4, each a JSON
message ended by a NUL byte), so no network port and no extra package are needed."""
import json
import os
import select
import shutil
import subprocess
import tempfile
import time

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--remote-debugging-pipe"]

IMAGES_JS = ("JSON.stringify(Array.from(document.images).map(i => ({complete: i.complete, "
             "width: i.naturalWidth, height: i.naturalHeight, alt: i.alt})))")


class DevTools:
    def __init__(self, timeout):
        self.user_dir = tempfile.mkdtemp(prefix="tokenflow-chromium-")
        to_child_r, self.to_child = os.pipe()
        self.from_child, from_child_w = os.pipe()

        def wire_fds():  # the child reads commands on fd 3 and writes replies on fd 4
            os.dup2(to_child_r, 3)
            os.dup2(from_child_w, 4)

        self.proc = subprocess.Popen([CHROMIUM, *FLAGS, f"--user-data-dir={self.user_dir}", "about:blank"],
                                     preexec_fn=wire_fds, close_fds=False, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_child_r)
        os.close(from_child_w)
        self.deadline = time.monotonic() + timeout
        self.buffer = b""
        self.next_id = 0
        self.events = []

    def send(self, method, params=None, session=None):
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self.to_child, json.dumps(message).encode() + b"\0")
        return self.wait(lambda m: m.get("id") == self.next_id)

    def wait(self, predicate):
        """Reads messages until one satisfies predicate (events are kept in self.events)."""
        while True:
            while b"\0" in self.buffer:
                raw, self.buffer = self.buffer.split(b"\0", 1)
                message = json.loads(raw)
                if "id" not in message:
                    self.events.append(message)
                if predicate(message):
                    if "error" in message:
                        raise RuntimeError(f"DevTools error: {message['error']}")
                    return message
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("chromium did not answer in time")
            ready, _, _ = select.select([self.from_child], [], [], left)
            if ready:
                chunk = os.read(self.from_child, 1 << 20)
                if not chunk:
                    raise RuntimeError("chromium exited")
                self.buffer += chunk

    def close(self):
        try:
            os.write(self.to_child, json.dumps({"id": 0, "method": "Browser.close"}).encode() + b"\0")
            self.proc.wait(timeout=10)
        except Exception:
            self.proc.kill()
            self.proc.wait()
        os.close(self.to_child)
        os.close(self.from_child)
        shutil.rmtree(self.user_dir, ignore_errors=True)


def inspect_page(url, timeout=90, screenshot=None):
    """Loads url; returns {"images": [...], "console_errors": [...], "exceptions": [...],
    "log_errors": [...], "title": str}. With screenshot (a path), the whole page is also saved
    there as a PNG, for a person to look at."""
    tools = DevTools(timeout)
    try:
        target = tools.send("Target.createTarget", {"url": "about:blank"})["result"]["targetId"]
        session = tools.send("Target.attachToTarget", {"targetId": target, "flatten": True})["result"]["sessionId"]
        for domain in ("Runtime", "Log", "Page"):
            tools.send(f"{domain}.enable", session=session)
        tools.events.clear()
        tools.send("Page.navigate", {"url": url}, session=session)
        tools.wait(lambda m: m.get("method") == "Page.loadEventFired" or
                   any(e.get("method") == "Page.loadEventFired" for e in tools.events))
        images = json.loads(tools.send("Runtime.evaluate", {"expression": IMAGES_JS, "returnByValue": True},
                                       session=session)["result"]["result"]["value"])
        title = tools.send("Runtime.evaluate", {"expression": "document.title", "returnByValue": True},
                           session=session)["result"]["result"]["value"]
        if screenshot is not None:
            import base64
            shot = tools.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True},
                              session=session)["result"]["data"]
            with open(screenshot, "wb") as f:
                f.write(base64.b64decode(shot))
        events = tools.events
        return {
            "images": images,
            "title": title,
            "console_errors": [e["params"] for e in events if e.get("method") == "Runtime.consoleAPICalled"
                               and e["params"].get("type") in ("error", "assert")],
            "exceptions": [e["params"] for e in events if e.get("method") == "Runtime.exceptionThrown"],
            "log_errors": [e["params"]["entry"] for e in events if e.get("method") == "Log.entryAdded"
                           and e["params"]["entry"].get("level") == "error"],
        }
    finally:
        tools.close()
