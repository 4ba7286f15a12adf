"""The ablation's derived packs (experiments.py `derive_pack`): what each layer
alone leaves of the shipped packs, and that the real checker accepts it.

Run: integrations/agentdojo/.venv/bin/python -m unittest discover -s integrations/agentdojo
(`ipc check` from IPC, else $CARGO_TARGET_DIR/debug/ipc or target/debug/ipc; without a
binary the checker tests skip, except under CI=1)
"""

import os
import re
import subprocess
import tempfile
import unittest
from pathlib import Path

from experiments import derive_pack, derive_packs

ROOT = Path(__file__).resolve().parents[2]
PACKS = ["bank", "workspace", "slack", "travel"]
RULE = re.compile(r"^\s*(forbid|step_up|four_eyes)\b", re.M)
CRITICAL = re.compile(r"\bcritical\b")
PARAM = re.compile(r"^\s*param\s+(\w+)\s*:", re.M)


def code(text: str) -> str:
    """The text without its comments (a comment may say "critical")."""
    return "\n".join(line.split("//")[0] for line in text.splitlines())


def ipc() -> str | None:
    for p in [os.environ.get("IPC"), Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "debug/ipc"]:
        if p and Path(p).is_file():
            return str(p)
    return None


class Derive(unittest.TestCase):
    def setUp(self):
        self.packs = {p: (ROOT / "packs" / p / "pack.ipc").read_text() for p in PACKS}

    def test_the_shipped_packs_have_both_layers(self):
        # otherwise the tests below would prove nothing
        for p, text in self.packs.items():
            self.assertTrue(RULE.search(text), p)
            self.assertTrue(CRITICAL.search(code(text)), p)

    def test_value_resolution_alone_has_no_rule_and_every_critical_clause(self):
        for p, text in self.packs.items():
            d = derive_pack(text, "values")
            self.assertIsNone(RULE.search(d), p)
            self.assertEqual(re.findall(r"critical from [^\n]*", text), re.findall(r"critical from [^\n]*", d), p)
            self.assertEqual(PARAM.findall(text), PARAM.findall(d), p)
            # range validators (hard limits on a value) stay
            self.assertEqual(text.count("range "), d.count("range "), p)

    def test_a_rule_over_several_lines_goes_whole(self):
        text = ('action a.b "x" {\n  scope s.t\n  executor external\n  param n: Int\n'
                '  forbid "big"\n    when n > 3\n      and n < 9\n  param m: Int\n}\n')
        d = derive_pack(text, "values")
        self.assertNotIn("when", d)
        self.assertIn("param m: Int", d)
        self.assertTrue(d.endswith("}\n"))

    def test_approval_levels_alone_has_no_critical_clause_and_every_rule(self):
        for p, text in self.packs.items():
            d = derive_pack(text, "approvals")
            self.assertIsNone(CRITICAL.search(code(d)), p)
            self.assertNotIn("registry.", "\n".join(l for l in code(d).splitlines() if "param" in l), p)
            self.assertEqual(RULE.findall(text), RULE.findall(d), p)
            self.assertEqual(PARAM.findall(text), PARAM.findall(d), p)
            # what follows a removed clause on its line stays (normalize, hint)
            self.assertEqual(text.count("normalize"), d.count("normalize"), p)

    def test_a_word_in_a_string_or_comment_is_not_a_clause(self):
        text = 'param x: Text hint "critical from here" // critical from a.b\n'
        self.assertEqual(derive_pack(text, "approvals"), text)
        self.assertEqual(derive_pack('  // forbid "x" when y\n', "values"), '  // forbid "x" when y\n')

    def test_an_unknown_layer_is_an_error(self):
        with self.assertRaises(ValueError):
            derive_pack("", "both")

    def test_the_checker_accepts_every_derived_pack(self):
        binary = ipc()
        if binary is None:
            if os.environ.get("CI") == "1":
                self.fail("no ipc binary (set IPC)")
            self.skipTest("no ipc binary")
        with tempfile.TemporaryDirectory() as tmp:
            for p in PACKS:
                for layer in ("values", "approvals"):
                    folder = derive_packs(p, layer, Path(tmp))
                    self.assertFalse((folder / p / "scenarios").exists())
                    r = subprocess.run([binary, "check", "--format", "json", str(folder / p)],
                                       capture_output=True, text=True)
                    self.assertEqual(r.returncode, 0, f"{p} {layer}: {r.stdout} {r.stderr}")
                    # the shipped packs stay untouched
                    self.assertNotEqual((folder / p / "pack.ipc").read_text(), self.packs[p])


if __name__ == "__main__":
    unittest.main()
