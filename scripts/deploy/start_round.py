"""Start an evaluation round through the deployed site, as an admin would, and wait for it.

Used by scripts/deploy_check.sh; standard library only (it runs on the host, outside the
images). Logs in on ``/accounts/login/``, posts ``/rounds/new/`` and polls
``/api/v1/rounds/<n>/`` until no submission of the round is open, then closes it (its
standings are published only then: docs/operating-rounds.md). The site speaks plain HTTP
behind its (absent) TLS proxy, so every request carries ``X-Forwarded-Proto: https`` and the
cookies are kept by hand (they are ``Secure``, which a client would only send over TLS).

Usage: python3 start_round.py BASE_URL USERNAME PASSWORD APPS QUERIES_PER_APP TIMEOUT_S
Exit status 0 when the round finished and closed; 1 with the reason otherwise.
"""

from __future__ import annotations

import http.client
import json
import re
import sys
import time
import urllib.parse


class Site:
    """A tiny HTTP client with a cookie jar that ignores the ``Secure`` flag."""

    def __init__(self, base_url: str) -> None:
        parts = urllib.parse.urlsplit(base_url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.origin = f"https://{parts.netloc}"
        self.cookies: dict[str, str] = {}

    def request(self, method: str, path: str, form: dict[str, object] | None = None,
                referer: str | None = None) -> tuple[int, dict[str, str], str]:
        body = None
        headers = {"X-Forwarded-Proto": "https", "Host": f"{self.host}:{self.port}"}
        if self.cookies:
            headers["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        if form is not None:
            body = urllib.parse.urlencode(form, doseq=True)
            headers["Content-Type"] = "application/x-www-form-urlencoded"
            headers["Referer"] = self.origin + (referer or path)
        connection = http.client.HTTPConnection(self.host, self.port, timeout=60)
        try:
            connection.request(method, path, body=body, headers=headers)
            response = connection.getresponse()
            text = response.read().decode("utf-8", "replace")
        finally:
            connection.close()
        for header, value in response.getheaders():
            if header.lower() == "set-cookie":
                name, _, rest = value.partition("=")
                self.cookies[name.strip()] = rest.split(";", 1)[0]
        return response.status, {k.lower(): v for k, v in response.getheaders()}, text

    def csrf_form(self, path: str) -> str:
        status, _, html = self.request("GET", path)
        if status != 200:
            sys.exit(f"start_round: GET {path} answered {status}")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html)
        if token is None:
            sys.exit(f"start_round: no CSRF token on {path}")
        return token.group(1)


def main(argv: list[str]) -> int:
    base_url, username, password, apps, queries, timeout_s = argv
    site = Site(base_url)
    token = site.csrf_form("/accounts/login/")
    status, headers, _ = site.request(
        "POST", "/accounts/login/",
        {"csrfmiddlewaretoken": token, "username": username, "password": password},
    )
    if status != 302:
        sys.exit(f"start_round: login answered {status}")
    token = site.csrf_form("/rounds/new/")
    status, headers, html = site.request(
        "POST", "/rounds/new/",
        {"csrfmiddlewaretoken": token, "apps": apps.split(","), "queries_per_app": queries},
    )
    found = re.search(r"/rounds/(\d+)/", headers.get("location", ""))
    if status != 302 or found is None:
        sys.exit(f"start_round: POST /rounds/new/ answered {status}: {html[:500]}")
    number = int(found.group(1))
    print(f"start_round: started round {number} ({apps}, {queries} queries per app)", flush=True)
    deadline = time.monotonic() + float(timeout_s)
    last = None
    while True:
        status, _, text = site.request("GET", f"/api/v1/rounds/{number}/")
        if status != 200:
            sys.exit(f"start_round: GET /api/v1/rounds/{number}/ answered {status}")
        progress = json.loads(text)["progress"]
        shown = (progress["done"], progress["total"])
        if shown != last:
            print(f"start_round: {progress['done']}/{progress['total']} episodes done", flush=True)
            last = shown
        if progress["total"] and not progress["open_submissions"]:
            break
        if time.monotonic() > deadline:
            sys.exit(f"start_round: round {number} still open after {timeout_s} s: {progress}")
        time.sleep(2)
    # close it, as an admin does on the round page: its standings are published then and it
    # becomes the board's ranking of record
    token = site.csrf_form(f"/rounds/{number}/")
    status, _, html = site.request(
        "POST", f"/rounds/{number}/close/", {"csrfmiddlewaretoken": token}
    )
    if status != 302:
        sys.exit(f"start_round: POST /rounds/{number}/close/ answered {status}: {html[:500]}")
    status, _, text = site.request("GET", f"/api/v1/rounds/{number}/")
    if status != 200 or not json.loads(text)["round"]["closed"]:
        sys.exit(f"start_round: round {number} did not close")
    print(f"start_round: closed round {number}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
