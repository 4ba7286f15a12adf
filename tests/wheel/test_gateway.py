"""Issue #36, item 4: `intentplane.Gateway` from the installed wheel: it
starts the wheel's own `ipc serve --stdio` and carries lines; every
decision is the gateway's, with its receipt; a gateway that cannot start,
stops, or does not answer raises a `GatewayError` naming its code, never
hangs."""

import json
import math
import subprocess
import sys
from decimal import Decimal

import pytest

import intentplane
from intentplane import Decision, Gateway, GatewayError
from conftest import IPC, ROOT

LANDLORD = "DE44 5001 0517 5407 3249 31"
ATTACKER = "DE75 5121 0800 1245 1261 99"


def transfer(iban, amount):
    return {"from_account": "emma-checking", "payee_iban": iban, "amount": amount, "currency": "EUR"}


@pytest.fixture
def gw(bank, tmp_path):
    with Gateway(bank / "bundle.json", bank / "world.toml", store=str(tmp_path / "g.db"), mandate=bank / "mandate.json") as g:
        yield g


def test_the_module_uses_the_wheels_binary():
    assert intentplane.find_ipc() == str(IPC)


def test_allow_executes_with_the_trusted_spelling(gw):
    d = gw.decide("payment.transfer", transfer(LANDLORD.lower(), Decimal("98.70")))
    assert isinstance(d, Decision)
    assert (d.decision, d.stage) == ("ALLOW", "execution"), d
    assert d.allowed and d.resolved["payee_iban"] == "DE44500105175407324931"
    assert d.result["to"] == "DE44500105175407324931"
    assert d.receipt.seq == 1 and d.receipt.hash.startswith("sha256:")
    assert d.operation_hash.startswith("sha256:")


def test_an_attackers_iban_is_denied_at_provenance(gw):
    d = gw.decide("payment.transfer", transfer(ATTACKER, "98.70"))
    assert (d.decision, d.stage) == ("DENY", "provenance"), d
    assert "not from a trusted source" in d.reason and d.hint
    assert not d.allowed and d.result is None and d.receipt.seq == 1


def test_a_large_transfer_is_pending_for_the_user(gw):
    d = gw.decide("payment.transfer", transfer(LANDLORD, 1200.00))
    assert (d.decision, d.stage, d.level) == ("PENDING", "approval", 1), d
    assert d.approve_by == "the user `emma`" and d.operation_hash.startswith("sha256:")


def test_a_mandate_per_call(bank, tmp_path):
    token = json.loads((bank / "mandate.json").read_text())
    with Gateway(bank / "bundle.json", bank / "world.toml", store=str(tmp_path / "g.db")) as g:
        # no mandate at all: refused at authn, with a receipt
        d = g.decide("payment.transfer", transfer(LANDLORD, "1.00"))
        assert (d.decision, d.stage) == ("DENY", "authn"), d
        assert g.decide("payment.transfer", transfer(LANDLORD, "1.00"), mandate=token).allowed
        assert g.decide("payment.transfer", transfer(LANDLORD, "1.00"), mandate=bank / "mandate.json").allowed


def test_the_receipts_chain_verifies(bank, tmp_path):
    store = tmp_path / "g.db"
    with Gateway(bank / "bundle.json", bank / "world.toml", store=str(store), mandate=bank / "mandate.json") as g:
        seqs = [g.decide("payment.transfer", transfer(i, "5.00")).receipt.seq for i in (LANDLORD, ATTACKER, LANDLORD)]
    assert seqs == [1, 2, 3]
    out = subprocess.run([str(IPC), "receipts", "verify", str(store)], capture_output=True, text=True)
    assert out.returncode == 0 and "3 receipts verify" in out.stdout, out


def test_a_value_json_cannot_hold_raises_and_the_gateway_goes_on(gw):
    for bad in (math.nan, {1, 2}, b"bytes", Decimal("NaN")):
        with pytest.raises(GatewayError) as e:
            gw.decide("payment.transfer", transfer(LANDLORD, bad))
        assert e.value.code == "intentplane::encode", e.value
    # nothing was sent: the next decision is the first receipt
    d = gw.decide("payment.transfer", transfer(LANDLORD, "1.00"))
    assert d.allowed and d.receipt.seq == 1


def test_a_line_the_gateway_refuses_is_a_deny_with_its_receipt(gw):
    # an unknown key, and an amount with more than two decimals (a
    # Decimal goes as its exact text; a Python float would already have
    # lost these digits): refused at the contract, each a decision the
    # chain keeps
    d = gw.decide("payment.transfer", {**transfer(LANDLORD, "1.00"), "memo": "x"})
    assert (d.decision, d.stage) == ("DENY", "contract") and d.receipt.seq == 1, d
    d = gw.decide("payment.transfer", transfer(LANDLORD, Decimal("1000.00000000000001")))
    assert (d.decision, d.stage) == ("DENY", "contract") and d.receipt.seq == 2, d
    assert "1000.00000000000001" in d.reason, d


def test_a_gateway_that_cannot_start_names_its_diagnostic(bank, tmp_path):
    with pytest.raises(GatewayError) as e:
        Gateway(bank / "bundle.json", bank / "world.toml", mandate=bank / "mandate.json")
    assert e.value.code == "ipc::serve::no_store", e.value
    assert "no store" in str(e.value)
    with pytest.raises(GatewayError) as e:
        Gateway(tmp_path / "missing.json", bank / "world.toml", ephemeral=True)
    assert e.value.code == "ipc::bundle::io", e.value
    # an edited bundle is refused, never run
    edited = tmp_path / "edited.json"
    edited.write_text((bank / "bundle.json").read_text().replace("10000", "10001", 1))
    with pytest.raises(GatewayError) as e:
        Gateway(edited, bank / "world.toml", ephemeral=True)
    assert e.value.code.startswith("ipc::bundle::"), e.value


def test_a_crashed_gateway_raises_and_stays_closed(gw):
    assert gw.decide("payment.transfer", transfer(LANDLORD, "1.00")).allowed
    gw._proc.kill()
    with pytest.raises(GatewayError) as e:
        gw.decide("payment.transfer", transfer(LANDLORD, "1.00"))
    assert e.value.code == "intentplane::exited", e.value
    with pytest.raises(GatewayError) as e:
        gw.decide("payment.transfer", transfer(LANDLORD, "1.00"))
    assert e.value.code == "intentplane::closed"


def test_a_gateway_that_does_not_answer_times_out(tmp_path, bank):
    # a stand-in that says it is ready and then reads without answering
    silent = tmp_path / "silent"
    silent.write_text(f"#!{sys.executable}\nimport sys\nprint('{{\"ready\": true}}', flush=True)\nfor _ in sys.stdin: pass\n")
    silent.chmod(0o755)
    g = Gateway(bank / "bundle.json", bank / "world.toml", ephemeral=True, ipc=silent, timeout=1)
    with pytest.raises(GatewayError) as e:
        g.decide("payment.transfer", transfer(LANDLORD, "1.00"))
    assert e.value.code == "intentplane::timeout"
    assert g._proc.poll() is not None  # stopped, not left hanging
    # one that never says it is ready
    mute = tmp_path / "mute"
    mute.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(60)\n")
    mute.chmod(0o755)
    with pytest.raises(GatewayError) as e:
        Gateway(bank / "bundle.json", bank / "world.toml", ephemeral=True, ipc=mute, timeout=1)
    assert e.value.code == "intentplane::timeout"


def test_the_agent_tool_example_runs(bank, tmp_path):
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "python" / "agent_tool.py"),
         str(bank / "bundle.json"), str(bank / "world.toml"), str(bank / "mandate.json"), str(tmp_path / "g.db")],
        capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 0, out.stderr
    sent, refused = out.stdout.splitlines()
    assert sent.startswith("sent: ") and "DE44500105175407324931" in sent
    assert refused.startswith("refused at provenance: ")


def test_shadow_mode_is_read_as_a_decision_with_what_it_would_be(bank, tmp_path):
    # beside the bank's world: its key and registry paths are relative to it
    world = bank / "shadow-world.toml"
    world.write_text((bank / "world.toml").read_text() + "[enforce.tenants]\nemma = false\n")
    with Gateway(bank / "bundle.json", world, store=str(tmp_path / "s.db"), mandate=bank / "mandate.json") as g:
        d = g.decide("payment.transfer", transfer(ATTACKER, "98.70"))
    assert d.decision == "SHADOW" and d.shadow and not d.allowed, d
    assert d.would_be["decision"] == "DENY" and d.would_be["stage"] == "provenance", d
