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


def open_page(browser, server):
    ctx = browser.new_context()
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
    assert c.locator("h3").text_content() == "payment.transfer for emmawaiting"
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
    assert c.locator("h3").text_content() == "vendor.change_iban for clerk of acmewaiting"
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
    message(page, "Declined mandate " + r["mandate"])
    from playwright.sync_api import expect

    expect(page.locator("article.mandate")).to_have_count(0)
    assert page.evaluate("() => window.__csp") == []
