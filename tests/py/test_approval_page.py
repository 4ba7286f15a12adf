"""The approval page (issue #15, item 3) in a real headless browser.

Debian's Chromium, driven by Playwright, opens the page `ipc serve --listen`
serves on http://127.0.0.1:PORT (a secure context, so WebCrypto's Ed25519
is there). The approver signs in with their own secret key file; every
signature is made in the browser and checked by the Rust server. Each test
runs its own server over its own SQLite store, in a world with the real
clock (so an operation can expire while the test waits).

Needs the `ipc` binary `cargo test` built and /usr/bin/chromium; without
them the tests skip, except under CI=1, where they fail.
"""

import json
import os
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from tools import require

ROOT = Path(__file__).resolve().parents[2]
TARGET = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
IPC = TARGET / "debug" / "ipc"
CHROMIUM = Path("/usr/bin/chromium")
TOKEN = "agent-host-token-0123456789abcdef"

# What both sides must encode byte for byte (the Rust side asserts the same
# string in `gateway::approval`'s tests): keys in UTF-16 order, strings as
# JSON.stringify writes them, an integer as digits.
JCS_OBJECT = {
    "operation_hash": "sha256:ab",
    "nonce": "\u00e9\u20ac\U0001f600",
    "expires_at": 1764000000,
    "approver": 'zo\u00eb "q"\n\u0001',
}
JCS_EXPECTED = (
    '{"approver":"zo\u00eb \\"q\\"\\n\\u0001","expires_at":1764000000,'
    '"nonce":"\u00e9\u20ac\U0001f600","operation_hash":"sha256:ab"}'
)

APPROVERS = {
    # name: (owners, roles)
    "emma": ([], []),
    "clerk": (["acme"], []),
    "cfo": (["acme"], ["treasury"]),
    "noah": (["globex"], ["treasury"]),
}


require("ipc binary", IPC.exists(), f"{IPC} is missing: run `cargo test` first")
require("Chromium", CHROMIUM.exists(), "no /usr/bin/chromium: apt-get install chromium")


def ipc(*args, cwd=None):
    r = subprocess.run([str(IPC), *map(str, args)], cwd=cwd, capture_output=True, text=True)
    assert r.returncode == 0, f"ipc {' '.join(map(str, args))}: {r.stderr}"
    return r.stdout


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Keys, a signed bundle of the bank and AP packs, and a world file."""
    d = tmp_path_factory.mktemp("world")
    for name in ["issuer", "bundle", *APPROVERS]:
        ipc("keygen", "-o", d / name)
    ipc("build", ROOT / "packs" / "bank", ROOT / "packs" / "ap", "--sign", d / "bundle.key", "-o", d / "bundle.json")
    lines = ['mandate_keys = ["issuer.pub"]', 'bundle_keys = ["bundle.pub"]', "[approvers]"]
    for name, (owners, roles) in APPROVERS.items():
        lines.append(f'{name} = {{ key = "{name}.pub", owners = {json.dumps(owners)}, roles = {json.dumps(roles)} }}')
    lines.append("[registries]")
    for pack in ["bank", "ap"]:
        lines.append(f"{pack} = {json.dumps(str(ROOT / 'packs' / pack / 'registries'))}")
    (d / "world.toml").write_text("\n".join(lines) + "\n")
    token = d / "token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    return d


def mandate(world, user, pack="bank", owner=None, ttl=3600, payee=None):
    args = ["token", "issue", "--bundle", world / "bundle.json", "--bundle-key", world / "bundle.pub",
            "--key", world / "issuer.key",
            "--pack", pack, "--user", user, "--ttl", ttl, "--budget", "100000.00"]
    if owner:
        args += ["--owner", owner]
    if pack == "bank":
        args += ["--scope", "payments.write", "--scope", "account.write",
                 "--claim", f"account={user}-checking", "--claim", "currency=EUR"]
        if payee:
            args += ["--claim", f"payee={payee}"]
    else:
        args += ["--scope", "vendors.write", "--scope", "payments.write"]
    return json.loads(ipc(*args))


class Server:
    """`ipc serve --listen 127.0.0.1:0` over a fresh SQLite store."""

    def __init__(self, world, tmp):
        self.proc = subprocess.Popen(
            [str(IPC), "serve", "--bundle", world / "bundle.json", "--world", world / "world.toml",
             "--store", tmp / "state.db", "--listen", "127.0.0.1:0", "--auth-token-file", world / "token"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        first = self.proc.stdout.readline().strip()
        assert first.startswith("listening on http://"), first
        self.base = first.removeprefix("listening on ")

    def call(self, method, path, body=None, token=TOKEN):
        req = urllib.request.Request(self.base + path, method=method,
                                     data=None if body is None else json.dumps(body).encode())
        req.add_header("Content-Type", "application/json")
        if token:
            req.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def text(self, path, token=TOKEN):
        """GET `path` as text (`/metrics`)."""
        req = urllib.request.Request(self.base + path)
        req.add_header("Authorization", f"Bearer {token}")
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.read().decode()

    def refused(self, reason):
        """`ipc_http_refused_total{reason}` as `/metrics` says it now (0 when absent)."""
        for line in self.text("/metrics").splitlines():
            if line.startswith(f'ipc_http_refused_total{{reason="{reason}"}} '):
                return int(line.split()[-1])
        return 0

    def decide(self, proposal, m):
        status, d = self.call("POST", "/v1/decide", {"proposal": proposal, "mandate": m})
        assert status == 200, d
        return d

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=10)


@pytest.fixture
def server(world, tmp_path):
    s = Server(world, tmp_path)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(headless=True, executable_path=str(CHROMIUM))
        yield b
        b.close()


def open_page(browser, server, width=None):
    ctx = browser.new_context(viewport={"width": width, "height": 844}) if width else browser.new_context()
    page = ctx.new_page()
    # every Content-Security-Policy violation the page causes, for the tests
    # to assert there is none: the page works under its own strict policy
    page.add_init_script(
        "window.__csp = []; document.addEventListener('securitypolicyviolation',"
        " e => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI));")
    page.goto(server.base + "/approve")
    return page


def sign_in(page, world, name, key_of=None):
    """Signs in as `name` with the key file of `key_of` (default: `name`)."""
    page.fill("#approver", name)
    page.fill("#keytext", (world / f"{key_of or name}.key").read_text())
    page.click("#signin-button")
    # the page's CSP forbids eval, so waits go through locators
    page.locator("#who:visible, #message.error").first.wait_for()


def message(page, starts):
    from playwright.sync_api import expect

    expect(page.locator("#message")).to_have_text(re.compile("^" + re.escape(starts)))


def status(page, op, want):
    from playwright.sync_api import expect

    expect(card(page, op).locator(".status")).to_have_text(want)


def card(page, op):
    return page.locator(f'article[data-op="{op}"]')


def transfer(iban, amount):
    return {"action": "payment.transfer", "args": {
        "from_account": "emma-checking", "payee_iban": iban, "amount": amount, "currency": "EUR"}}


LANDLORD = "DE44500105175407324931"
CHANGE_IBAN = {"action": "vendor.change_iban", "args": {
    "vendor_id": "V-STADTWERKE", "callback_id": "CB-7", "new_iban": "ES91 2100 0418 4502 0005 1332"}}


def test_the_page_encodes_jcs_as_the_rust_side_does(browser, server):
    page = open_page(browser, server)
    assert page.evaluate("o => window.ipcApproval.jcs(o)", JCS_OBJECT) == JCS_EXPECTED


def test_the_approver_sees_only_theirs_in_major_units_and_approves(browser, server, world):
    m = mandate(world, "emma")
    d = server.decide(transfer(LANDLORD, "1500.00"), m)
    assert d["decision"] == "PENDING", d
    op = d["operation_hash"]
    page = open_page(browser, server)
    sign_in(page, world, "emma")
    assert page.text_content("#who-name") == "emma"
    c = card(page, op)
    c.wait_for()
    assert c.locator('tr[data-param="amount"] .value').text_content() == "1,500.00 EUR"
    # the IBAN in fours, and who the payee is in the owner's records
    payee = c.locator('tr[data-param="payee_iban"]')
    assert payee.locator(".value").text_content() == "DE44 5001 0517 5407 3249 31"
    assert payee.locator(".registry-name").text_content() == "Hausverwaltung Weber (landlord)"
    assert payee.locator(".origin").text_content() == "registry.beneficiaries"
    assert payee.locator(".origin").get_attribute("data-kind") == "registry"
    assert c.locator('tr[data-param="currency"] .origin').get_attribute("data-kind") == "mandate"
    # no doubled labels, no Markdown backticks
    assert c.locator('tr[data-param="amount"] .origin').text_content() == "the agent's proposal"
    assert c.locator("h3").text_content() == "Send money from the bound account \u2014 for emmawaiting"
    assert "`" not in c.text_content()
    assert c.locator(".status").text_content() == "waiting"
    assert "large transfer" in c.locator(".why").text_content()
    assert "policy" in c.locator(".why").first.text_content()
    assert c.locator(".approve-by").text_content() == "emma (the mandate's user)"
    assert page.locator("article.op").count() == 1
    # another tenant's approver does not see emma's operation
    other = open_page(browser, server)
    sign_in(other, world, "noah")
    other.wait_for_selector("#empty", state="visible")
    assert other.locator("article.op").count() == 0
    # approve: signed in the browser, checked by the server
    c.locator("button.approve").click()
    message(page, "Approved")
    d = server.decide(transfer(LANDLORD, "1500.00"), m)
    assert d["decision"] == "ALLOW", d
    assert d["approvers"] == ["emma"]
    page.click("#refresh")
    status(page, op, "executed")
    assert card(page, op).locator("button.approve").is_disabled()
    assert page.evaluate("() => window.__csp") == []


def test_what_is_new_is_marked_and_hostile_text_stays_text(browser, server, world):
    supplier = "DE02120300000000202051"
    m = mandate(world, "emma", payee=supplier)
    hostile = '<img src=x id=pwn onerror="document.title=`pwned`"><b id=bold>x</b>'
    p = transfer(supplier, "1100.00")
    p["args"]["subject"] = hostile
    d = server.decide(p, m)
    assert d["decision"] == "PENDING", d
    page = open_page(browser, server)
    sign_in(page, world, "emma")
    c = card(page, d["operation_hash"])
    c.wait_for()
    payee = c.locator('tr[data-param="payee_iban"]')
    assert payee.locator(".origin").get_attribute("data-kind") == "mandate"
    assert payee.locator(".new").text_content() == "NEW: not among the owner's records"
    # an account or a currency only the mandate can give is not news
    for name in ["from_account", "currency", "amount"]:
        assert c.locator(f'tr[data-param="{name}"] .new').count() == 0, name
    assert c.locator('tr[data-param="amount"] .value').text_content() == "1,100.00 EUR"
    # the agent's free text is shown as text, never run or parsed as markup
    assert c.locator('tr[data-param="subject"] .value').text_content() == hostile
    assert page.locator("#pwn, #bold").count() == 0
    assert page.title() != "pwned"
    assert page.evaluate("() => window.__csp") == []


def test_a_decline_is_signed_recorded_and_final(browser, server, world):
    m = mandate(world, "emma")
    d = server.decide(transfer(LANDLORD, "1200.00"), m)
    op = d["operation_hash"]
    page = open_page(browser, server)
    sign_in(page, world, "emma")
    card(page, op).locator("button.decline").click()
    card(page, op).locator("button.confirm-decline").click()
    message(page, "Declined")
    status(page, op, "declined")
    c = card(page, op)
    assert c.locator("button.approve").is_disabled() and c.locator("button.decline").is_disabled()
    assert "emma" in c.locator(".declined-by").text_content()
    # the receipt names who declined
    _, receipts = server.call("GET", "/v1/receipts?last=5")
    assert any(r["body"].get("change") == "decline" and r["body"].get("by") == "emma" for r in receipts)
    # no longer approvable, from the page's own code either
    r = page.evaluate("""async (op) => {
        const body = await window.ipcApproval.signed('approve', op);
        return window.ipcApproval.post('/v1/approver/approve', body);
    }""", {"operation_hash": op, "expires_at": int(time.time()) + 3600})
    assert r["status"] == 409 and r["data"]["code"] == "ipc::approvals::declined", r
    d = server.decide(transfer(LANDLORD, "1200.00"), m)
    assert (d["decision"], d["stage"]) == ("DENY", "approval"), d


def test_an_expired_operation_is_shown_expired_and_refused(browser, server, world):
    m = mandate(world, "emma", ttl=3)
    d = server.decide(transfer(LANDLORD, "1300.00"), m)
    assert d["decision"] == "PENDING", d
    op = d["operation_hash"]
    time.sleep(4)
    page = open_page(browser, server)
    sign_in(page, world, "emma")
    c = card(page, op)
    c.wait_for()
    assert c.locator(".status").text_content() == "expired"
    assert "(expired)" in c.locator(".expires").text_content()
    assert c.locator("button.approve").is_disabled()
    r = page.evaluate("""async (op) => {
        const body = await window.ipcApproval.signed('approve', op);
        return window.ipcApproval.post('/v1/approver/approve', body);
    }""", {"operation_hash": op, "expires_at": int(time.time()) + 600})
    assert r["status"] == 409 and r["data"]["code"] == "ipc::approvals::expired", r


def test_four_eyes_needs_the_user_then_the_treasury(browser, server, world):
    m = mandate(world, "clerk", pack="ap", owner="acme")
    d = server.decide(CHANGE_IBAN, m)
    assert d["decision"] == "PENDING", d
    op = d["operation_hash"]
    # a treasurer of another tenant does not even see it
    noah = open_page(browser, server)
    sign_in(noah, world, "noah")
    noah.wait_for_selector("#empty", state="visible")
    assert noah.locator("article.op").count() == 0
    # the user approves: still pending, the treasury must follow
    clerk = open_page(browser, server)
    sign_in(clerk, world, "clerk")
    c = card(clerk, op)
    c.wait_for()
    assert "treasury" in c.locator(".approve-by").text_content()
    assert "by role treasury" in c.locator(".why").first.text_content()
    assert c.locator("h3").text_content() == "Change the bank account of a vendor \u2014 for clerk of acmewaiting"
    c.locator("button.approve").click()
    message(clerk, "Approved")
    assert server.decide(CHANGE_IBAN, m)["decision"] == "PENDING"
    cfo = open_page(browser, server)
    sign_in(cfo, world, "cfo")
    c = card(cfo, op)
    c.wait_for()
    assert c.locator(".approved-by").text_content() == "clerk"
    c.locator("button.approve").click()
    message(cfo, "Approved")
    d = server.decide(CHANGE_IBAN, m)
    assert d["decision"] == "ALLOW", d
    assert d["approvers"] == ["clerk", "cfo"]


def test_a_wrong_key_cannot_sign_in_nor_sign(browser, server, world):
    m = mandate(world, "emma")
    op = server.decide(transfer(LANDLORD, "1400.00"), m)["operation_hash"]
    page = open_page(browser, server)
    # emma's name with noah's key: refused by the server
    sign_in(page, world, "emma", key_of="noah")
    assert page.text_content("#message").startswith("Sign-in failed")
    assert page.is_visible("#signin") and not page.is_visible("#operations")
    # a file that is not a key: refused by the page
    page.fill("#approver", "emma")
    page.fill("#keytext", "not a key")
    page.click("#signin-button")
    message(page, "Sign-in failed: the key is not a key file")
    sign_in(page, world, "emma")
    card(page, op).wait_for()
    # an approval signed in the browser by another key, under emma's session
    r = page.evaluate("""async (op) => {
        const other = await crypto.subtle.generateKey({name: 'Ed25519'}, false, ['sign', 'verify']);
        const body = await window.ipcApproval.signed('approve', op, other.privateKey);
        return window.ipcApproval.post('/v1/approver/approve', body);
    }""", {"operation_hash": op, "expires_at": int(time.time()) + 3600})
    assert r["status"] == 400 and "does not verify" in r["data"]["error"], r
    d = server.decide(transfer(LANDLORD, "1400.00"), m)
    assert d["decision"] == "PENDING", d


def test_hostile_text_is_escaped_whole_and_folded(browser, server, world):
    """What is shown is what is signed: controls, newlines and bidi marks
    are shown visibly, a long subject whole (folded, never cut)."""
    m = mandate(world, "emma")
    subject = "x" * 60 + "\npayee_iban DE00\u001b[2J\u202e\u200bcard 4111 1111 1111 1111 https://e.example/x"
    p = transfer(LANDLORD, "1100.00")
    p["args"]["subject"] = subject
    d = server.decide(p, m)
    assert d["decision"] == "PENDING", d
    page = open_page(browser, server)
    sign_in(page, world, "emma")
    c = card(page, d["operation_hash"])
    c.wait_for()
    lines = c.locator('tr[data-param="subject"] .value .line').all_text_contents()
    assert len(lines) >= 2, lines
    joined = "".join(lines)
    assert joined == "x" * 60 + "\\npayee_iban DE00\\u{1b}[2J\\u{202e}\\u{200b}card 4111 1111 1111 1111 https://e.example/x", joined
    assert not any(ch in joined for ch in "\n\u001b\u202e\u200b")
    assert c.locator('tr[data-param="payee_iban"]').count() == 1
    assert page.evaluate("() => window.__csp") == []


def test_an_expired_approval_is_shown_expired_and_a_fresh_one_counts(browser, server, world):
    m = mandate(world, "emma")
    p = transfer(LANDLORD, "1600.00")
    d = server.decide(p, m)
    op = d["operation_hash"]
    page = open_page(browser, server)
    sign_in(page, world, "emma")
    card(page, op).wait_for()
    # an approval valid for two seconds, signed by the page's own code
    r = page.evaluate("""async (op) => {
        const body = await window.ipcApproval.signed('approve', op);
        return window.ipcApproval.post('/v1/approver/approve', body);
    }""", {"operation_hash": op, "expires_at": int(time.time()) + 2})
    assert r["status"] == 200, r
    page.click("#refresh")
    from playwright.sync_api import expect
    expect(card(page, op).locator(".approved-by")).to_have_text("emma")
    time.sleep(3)
    page.click("#refresh")
    c = card(page, op)
    expect(c.locator(".expired-approvals")).to_contain_text("the approval of emma expired")
    assert c.locator(".approved-by").text_content() == "no one yet"
    assert c.locator(".status").text_content() == "waiting"
    # not shown as approved: the button signs a fresh approval, which counts
    assert c.locator("button.approve").text_content() == "Approve"
    assert not c.locator("button.approve").is_disabled()
    c.locator("button.approve").click()
    message(page, "Approved")
    d = server.decide(p, m)
    assert d["decision"] == "ALLOW", d


def test_screenshot_of_a_pending_operation(browser, server, world, tmp_path):
    """A picture of the page as an approver sees it (for a person to look
    at: `IPC_SCREENSHOT=path.png`)."""
    m = mandate(world, "emma")
    p = transfer(LANDLORD, "1500.00")
    p["args"]["subject"] = "Rent December, flat 3 \u2014 " + "thank you! " * 8
    d = server.decide(p, m)
    page = open_page(browser, server)
    page.set_viewport_size({"width": 900, "height": 900})
    sign_in(page, world, "emma")
    card(page, d["operation_hash"]).wait_for()
    out = Path(os.environ.get("IPC_SCREENSHOT", tmp_path / "page.png"))
    page.screenshot(path=str(out), full_page=True)
    assert out.stat().st_size > 0


ATTACKER = "DE89370400440532013000"


def test_the_page_encodes_nested_jcs_as_the_rust_side_does(browser, server):
    """A child mandate is nested: objects, arrays, integers, booleans, null
    (the Rust side signs `to_jcs`, which sorts every object's keys)."""
    page = open_page(browser, server)
    obj = {"z": [1, {"b": True, "a": None}], "a": {"y": "\u00e9", "x": -3}, "m": []}
    want = '{"a":{"x":-3,"y":"\u00e9"},"m":[],"z":[1,{"a":null,"b":true}]}'
    assert page.evaluate("o => window.ipcApproval.jcs(o)", obj) == want


def test_a_child_mandate_is_confirmed_and_signed_in_the_browser(browser, server, world):
    """Issue 25, item 3: the agent host proposes a child of Emma's mandate;
    she reads it on the page (the IBAN grouped, her registry's name, the
    outsider marked), signs it in her browser, and it decides; a second one
    she declines."""
    # the parent names the outsider (an administrator's ceiling): a child
    # may name it, and the page marks it as in none of Emma's registries
    parent = mandate(world, "emma", payee=ATTACKER)
    req = {"claims": {"payee": [LANDLORD, ATTACKER]}, "scopes": ["payments.write"],
           "budget": "1500.00", "calls": 2}
    status_, r = server.call("POST", "/v1/mandates", {"parent": parent, "request": req})
    assert status_ == 200, r
    child = r["mandate"]
    # one that widens (a budget above the parent's) is refused, never held
    wide = dict(req, budget="200000.00")
    status_, e = server.call("POST", "/v1/mandates", {"parent": parent, "request": wide})
    assert (status_, e["code"]) == (422, "ipc::mandate::widens"), e

    page = open_page(browser, server)
    sign_in(page, world, "emma")
    box = page.locator(f'article[data-mandate="{child}"]')
    box.wait_for()
    summary = box.locator(".summary").text_content()
    assert "DE44 5001 0517 5407 3249 31 (Hausverwaltung Weber (landlord))" in summary, summary
    assert "up to 1,500.00 EUR" in summary, summary
    items = box.locator('tr[data-claim="payee"] .item')
    assert items.count() == 2
    assert items.nth(0).locator(".new").count() == 0
    assert items.nth(1).locator(".new").text_content() == "NOT IN ANY REGISTRY OF YOURS"
    assert items.nth(1).locator(".line").text_content() == "DE89 3704 0044 0532 0130 00"
    # what she signs decides where each payee may come from: shown too
    # (issue 39, finding 1): only the payees she names, nothing wider
    sources = box.locator("dd.sources")
    assert sources.count() > 0
    words = [sources.nth(i).text_content() for i in range(sources.count())]
    assert any(w.startswith("payment.transfer.payee_iban") and "the payee this mandate names" in w
               for w in words), words
    assert not any("WIDER" in w or "registry" in w for w in words), words
    assert box.locator("dd.pack").text_content() == "bank"
    # noah does not see it
    other = open_page(browser, server)
    sign_in(other, world, "noah")
    other.wait_for_selector("#empty", state="visible")
    assert other.locator("article.mandate").count() == 0

    box.locator("button.confirm").click()
    message(page, "Issued mandate " + child)
    status_, got = server.call("GET", f"/v1/mandates?id={child}")
    assert got["status"] == "issued", got
    token = got["token"]
    assert token["key_id"] != parent["key_id"], "signed with Emma's key, not the issuer's"
    d = server.decide(transfer(LANDLORD, "100.00"), token)
    assert d["decision"] == "ALLOW", d
    d = server.decide(transfer("FR7630006000011234567890189", "10.00"), token)
    assert d["decision"] == "DENY", d

    # a second proposal, declined on the page
    status_, r = server.call("POST", "/v1/mandates", {"parent": parent, "request": req})
    assert status_ == 200, r
    page.click("#refresh")
    second = page.locator(f'article[data-mandate="{r["mandate"]}"]')
    second.locator("button.decline").click()
    second.locator("button.confirm-decline").click()
    message(page, "Declined mandate " + r["mandate"])
    from playwright.sync_api import expect

    expect(page.locator("article.mandate")).to_have_count(0)
    assert page.evaluate("() => window.__csp") == []


# A subject as long as the pack allows (140), without a space to break at.
LONG_SUBJECT = "Rechnung-" + "0123456789" * 13 + "x"


def overflow(page):
    """What runs off the page or off a card sideways: an empty list when
    everything fits."""
    return page.evaluate("""() => {
        const out = [];
        const d = document.documentElement;
        if (d.scrollWidth > d.clientWidth) out.push('page ' + d.scrollWidth + ' > ' + d.clientWidth);
        for (const c of document.querySelectorAll('article')) {
            if (c.scrollWidth > c.clientWidth) {
                out.push((c.dataset.op || c.dataset.mandate) + ' ' + c.scrollWidth + ' > ' + c.clientWidth);
            }
        }
        return out;
    }""")


def pending_card(browser, server, world, who, proposal, width=None, **kw):
    """`proposal` decided PENDING under a mandate of `who` (`kw`: the
    mandate's), and the page `who` signed in on (`width` px wide): the
    page, the operation's card, its hash."""
    d = server.decide(proposal, mandate(world, who, **kw))
    assert d["decision"] == "PENDING", d
    page = open_page(browser, server, width=width)
    sign_in(page, world, who)
    c = card(page, d["operation_hash"])
    c.wait_for()
    return page, c, d["operation_hash"]


@pytest.mark.parametrize("width", [390, 1280])
def test_the_page_fits_a_phone_and_a_desktop(browser, server, world, width):
    """Issue #40, item 18: at 390 px the values table and the source paths
    ran off the card (`scrollWidth` 652): the approver had to scroll
    sideways to read a payment. Now nothing is wider than the screen, on a
    phone and on a desktop: a transfer with a long subject and a long IBAN,
    and a vendor's new IBAN from `registry.callbacks[callback_id].iban`."""
    p = transfer(LANDLORD, "1500.00")
    p["args"]["subject"] = LONG_SUBJECT
    page, c, _ = pending_card(browser, server, world, "emma", p, width)
    assert page.evaluate("() => document.documentElement.clientWidth") == width
    assert overflow(page) == []
    # the long subject is shown whole, not clipped away
    lines = c.locator('tr[data-param="subject"] .value .line').all_text_contents()
    assert "".join(lines) == LONG_SUBJECT
    # the four-eyes change: the longest source path of the shipped packs
    clerk, c, _ = pending_card(browser, server, world, "clerk", CHANGE_IBAN, width, pack="ap", owner="acme")
    assert "registry.callbacks[callback_id].iban" in c.locator('tr[data-param="new_iban"] .origin').text_content()
    assert overflow(clerk) == []
    # a decline waiting for its confirmation fits too
    c.locator("button.decline").click()
    c.locator("button.confirm-decline").wait_for()
    assert overflow(clerk) == []


def test_loading_the_page_is_refused_nothing(browser, server, world):
    """Issue #40, item 18: every load of the page asked for `/favicon.ico`,
    which the API's guard refused with 403 (a console error, and
    `ipc_http_refused_total{reason="origin"}`, the counter an operator
    alerts on, moved). Now the icon is answered (no content), and loading
    and using the page moves no refusal counter."""
    d = server.decide(transfer(LANDLORD, "1500.00"), mandate(world, "emma"))
    before = server.refused("origin")
    ctx = browser.new_context()
    page = ctx.new_page()
    refused = []
    page.on("response", lambda r: r.status >= 400 and refused.append(f"{r.status} {r.url}"))
    errors = []
    page.on("console", lambda msg: msg.type == "error" and errors.append(msg.text))
    page.goto(server.base + "/approve")
    sign_in(page, world, "emma")
    card(page, d["operation_hash"]).wait_for()
    # the icon as a browser asks for it (an image, same origin), whether or
    # not this headless browser asks by itself
    with page.expect_response(lambda r: "/favicon.ico" in r.url) as icon:
        page.evaluate("() => { new Image().src = '/favicon.ico?' + Date.now(); }")
    assert icon.value.status == 204, icon.value.status
    assert refused == [], refused
    assert errors == [], errors
    assert server.refused("origin") == before
    # the icon is the page's: another site's request for it is refused
    req = urllib.request.Request(server.base + "/favicon.ico", headers={"Sec-Fetch-Site": "cross-site"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=30)
    assert e.value.code == 403


def test_a_decline_asks_to_be_confirmed(browser, server, world):
    """Issue #40, item 18: Decline was final after one click, beside
    Approve and looking like it. Now it is styled apart, and a first click
    only asks: nothing is signed nor sent until "Confirm decline"; "Keep"
    takes the question back."""
    from playwright.sync_api import expect

    p = transfer(LANDLORD, "1700.00")
    page, c, op = pending_card(browser, server, world, "emma", p)
    style = "(e) => getComputedStyle(e).backgroundColor + ' ' + getComputedStyle(e).color"
    assert c.locator("button.approve").evaluate(style) != c.locator("button.decline").evaluate(style)
    assert c.locator("button.confirm-decline").count() == 0
    c.locator("button.decline").click()
    confirm = c.locator("button.confirm-decline")
    expect(confirm).to_have_text("Confirm decline")
    assert c.locator(".confirm-text").text_content().startswith("Decline this operation?")
    # nothing was sent: still waiting, no decline receipt
    _, receipts = server.call("GET", "/v1/receipts?last=5")
    assert not any(r["body"].get("change") == "decline" for r in receipts), receipts
    assert c.locator(".status").text_content() == "waiting"
    # "Keep" takes it back
    c.locator("button.keep").click()
    expect(confirm).to_have_count(0)
    expect(c.locator("button.decline")).to_be_visible()
    # and the second step declines
    c.locator("button.decline").click()
    c.locator("button.confirm-decline").click()
    message(page, "Declined")
    status(page, op, "declined")
    _, receipts = server.call("GET", "/v1/receipts?last=5")
    assert any(r["body"].get("change") == "decline" and r["body"].get("by") == "emma" for r in receipts)


def test_each_card_leads_with_the_action_in_words(browser, server, world):
    """Issue #40, item 18: a card's title was `payment.transfer for emma`.
    Now it is the pack's own description of the action, for whom; the
    action's name follows, smaller."""
    _, c, _ = pending_card(browser, server, world, "emma", transfer(LANDLORD, "1500.00"))
    assert c.locator("h3 .title").text_content() == "Send money from the bound account \u2014 for emma"
    assert c.locator(".action").text_content() == "payment.transfer (bank)"
    _, c, _ = pending_card(browser, server, world, "clerk", CHANGE_IBAN, pack="ap", owner="acme")
    assert c.locator("h3 .title").text_content() == "Change the bank account of a vendor \u2014 for clerk of acme"
    assert c.locator(".action").text_content() == "vendor.change_iban (ap)"
