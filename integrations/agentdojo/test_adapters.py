"""The harness's mappings (no AgentDojo needed): what the gateway is shown.

Run: integrations/agentdojo/.venv/bin/python -m unittest discover -s integrations/agentdojo
"""

import calendar
import unittest
from datetime import datetime
from types import SimpleNamespace

from adapters import ADAPTERS, Unmapped, day, emails_in, links, major, minute, quoted, stamp


def call(function, **args):
    return SimpleNamespace(function=function, args=args)


def epoch(text: str) -> int:
    return calendar.timegm(datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").timetuple())


class Links(unittest.TestCase):
    def test_a_link_in_a_message_is_found(self):
        self.assertEqual(links("Check out this link: www.secure-systems-252.com"),
                         ["www.secure-systems-252.com"])

    def test_a_path_is_kept_and_closing_punctuation_dropped(self):
        self.assertEqual(links("my TODO list at www.company-todo-list.com/alice!"),
                         ["www.company-todo-list.com/alice"])
        self.assertEqual(links("see https://example.org/a/b."), ["https://example.org/a/b"])

    def test_a_sentence_glued_to_an_address_is_not_part_of_it(self):
        # AgentDojo's slack user task 4: "www.our-company.com.They sent ..."
        self.assertEqual(links("to our website www.our-company.com.They sent"), ["www.our-company.com"])

    def test_a_shouted_link_is_a_link(self):
        # found by the gateway-aware attacks (experiments.py adaptive)
        self.assertEqual(links("see WWW.SECURE-SYSTEMS-252.COM now"), ["WWW.SECURE-SYSTEMS-252.COM"])

    def test_an_email_domain_and_abbreviations_are_not_links(self):
        self.assertEqual(links("write to dora@gmail.com, i.e. today; key 1a7b3d."), [])

    def test_every_link_is_listed_once(self):
        self.assertEqual(links("a.example.com and b.example.com, a.example.com"),
                         ["a.example.com", "b.example.com"])


class Prompt(unittest.TestCase):
    def test_quotes_inside_words_open_nothing(self):
        text = "I'm heading to Paris. My friend recommended 'Le Marais Boutique'. I'll go"
        self.assertEqual(quoted(text), ["Le Marais Boutique"])

    def test_double_quotes_too(self):
        self.assertEqual(quoted('an event called "Booking hotel X" please'), ["Booking hotel X"])

    def test_addresses_are_lower_cased(self):
        self.assertEqual(emails_in("my wife at 'janeLong@google.com'"), ["janelong@google.com"])

    def test_the_workspace_mandate_names_only_the_prompts_addresses(self):
        claims = ADAPTERS["workspace"].claims("Share it with john.doe@gmail.com and Sarah", None)
        self.assertEqual(claims, [("recipients", "john.doe@gmail.com")])


class Times(unittest.TestCase):
    def test_a_tool_time_goes_to_the_gateway_and_back(self):
        self.assertEqual(stamp("2024-05-19 12:00"), "2024-05-19T12:00:00Z")
        self.assertEqual(minute(epoch("2024-05-19T12:00:00Z")), "2024-05-19 12:00")

    def test_a_decisions_times_and_amounts_go_to_the_tool(self):
        # a decision's `resolved` holds them as the caller wrote them
        self.assertEqual(minute("2024-05-19T12:00:00Z"), "2024-05-19 12:00")
        self.assertEqual(day("2024-05-19T12:00:00Z"), "2024-05-19")
        self.assertEqual(day("2024-05-19"), "2024-05-19")
        self.assertEqual(major("1500.00"), 1500.0)
        self.assertEqual(major(150000), 1500.0)


class Workspace(unittest.TestCase):
    ws = ADAPTERS["workspace"]

    def test_every_address_and_attachment_is_shown_to_the_gateway(self):
        p = self.ws.to_proposal(call("send_email", recipients=["a@x.org"], subject="s", body="b",
                                     cc=["c@x.org"], bcc=["mark.black-2134@gmail.com"],
                                     attachments=[{"type": "file", "file_id": "19"}]), None)
        self.assertEqual(p["action"], "email.send")
        self.assertEqual(p["args"]["bcc"], ["mark.black-2134@gmail.com"])
        self.assertEqual(p["args"]["attachments"], ["19"])

    def test_an_event_pasted_as_an_attachment_is_not_mapped(self):
        with self.assertRaises(Unmapped):
            self.ws.to_proposal(call("send_email", recipients=["a@x.org"], subject="s", body="b",
                                     attachments=[{"type": "event", "event_details": {}}]), None)

    def test_the_tool_runs_with_the_decisions_values_not_the_agents(self):
        c = call("send_email", recipients=["A@X.org"], subject="s", body="b")
        resolved = {"to": ["a@x.org"], "cc": [], "bcc": [], "subject": "s", "body": "b", "attachments": []}
        args = self.ws.from_resolved(c, resolved)
        self.assertEqual(args["recipients"], ["a@x.org"])
        self.assertIsNone(args["attachments"])

    def test_read_tools_are_not_actions(self):
        self.assertIsNone(self.ws.to_proposal(call("search_emails", query="x"), None))

    def test_a_created_file_becomes_the_users(self):
        result = SimpleNamespace(id_="26")
        self.assertEqual(self.ws.recorded(call("create_file", filename="f", content=""), result, None),
                         [("files", "26")])


class Slack(unittest.TestCase):
    sl = ADAPTERS["slack"]

    def test_a_link_in_a_direct_message_is_a_critical_value(self):
        p = self.sl.to_proposal(call("send_direct_message", recipient="Alice",
                                     body="Check out this link: www.secure-systems-252.com"), None)
        self.assertEqual(p, {"action": "message.direct", "args": {
            "recipient": "Alice", "body": "Check out this link: www.secure-systems-252.com",
            "links": ["www.secure-systems-252.com"]}})

    def test_a_visit_is_an_action(self):
        p = self.sl.to_proposal(call("get_webpage", url="www.true-informations.com"), None)
        self.assertEqual(p["action"], "web.fetch")

    def test_the_user_confirms_the_values_of_their_own_call(self):
        p = self.sl.to_proposal(call("add_user_to_channel", user="Charlie", channel="External_x"), None)
        self.assertEqual(self.sl.confirmable(p), [("members", "Charlie"), ("channels", "External_x")])
        p = self.sl.to_proposal(call("invite_user_to_slack", user="Dora", user_email="Dora@Gmail.com"), None)
        self.assertEqual(self.sl.confirmable(p), [("invitees", "dora@gmail.com")])

    def test_an_invited_person_becomes_a_member(self):
        c = call("invite_user_to_slack", user="Dora", user_email="dora@gmail.com")
        self.assertEqual(self.sl.recorded(c, None, None), [("members", "Dora")])
        self.assertEqual(self.sl.from_resolved(c, {"user": "Dora", "email": "dora@gmail.com"}),
                         {"user": "Dora", "user_email": "dora@gmail.com"})


class Travel(unittest.TestCase):
    tr = ADAPTERS["travel"]

    def test_a_reservation_names_its_place(self):
        p = self.tr.to_proposal(call("reserve_hotel", hotel="Riverside View Hotel",
                                     start_day="2024-05-13", end_day="2024-05-17"), None)
        self.assertEqual(p["args"]["hotel"], "Riverside View Hotel")
        back = self.tr.from_resolved(call("reserve_hotel"), {
            "hotel": "Riverside View Hotel", "start": epoch("2024-05-13T00:00:00Z"),
            "end": epoch("2024-05-17T00:00:00Z")})
        self.assertEqual(back, {"hotel": "Riverside View Hotel", "start_day": "2024-05-13",
                                "end_day": "2024-05-17"})

    def test_action_names_are_the_travel_packs(self):
        p = self.tr.to_proposal(call("send_email", recipients=["jay@google.com"], subject="s", body="b"), None)
        self.assertEqual(p["action"], "trip.send_email")


if __name__ == "__main__":
    unittest.main()


class DeclaredReads(unittest.TestCase):
    """Only a declared read runs undecided: a tool an adapter does not know
    (a write tool added to a suite, a name the model made up) is refused."""

    # what the banking adapter reads before looking at the tool's name
    ENV = SimpleNamespace(bank_account=SimpleNamespace(iban="DE89370400440532013000",
                                                       scheduled_transactions=[]))

    def test_an_unknown_tool_is_refused_not_read(self):
        for name, adapter in ADAPTERS.items():
            with self.subTest(suite=name), self.assertRaises(Unmapped):
                adapter.proposal(call("transfer_everything", to="attacker"), self.ENV)

    def test_a_declared_read_needs_no_decision(self):
        for name, adapter in ADAPTERS.items():
            self.assertTrue(adapter.reads, name)
            for tool in adapter.reads:
                with self.subTest(suite=name, tool=tool):
                    self.assertIsNone(adapter.proposal(call(tool), self.ENV))

    def test_every_tool_of_every_suite_is_a_read_or_an_action(self):
        try:
            from agentdojo.task_suite.load_suites import get_suite
        except ImportError:  # the harness's venv has it; a bare python does not
            self.skipTest("agentdojo is not installed")
        for name, adapter in ADAPTERS.items():
            tools = {t.name for t in get_suite("v1.2", name).tools}
            with self.subTest(suite=name):
                self.assertLessEqual(adapter.reads, tools)
            for tool in sorted(tools - adapter.reads):
                # every other tool is one the adapter maps to an action: with
                # no arguments it fails reading them, never answers "a read"
                with self.subTest(suite=name, tool=tool):
                    try:
                        got = adapter.to_proposal(call(tool), self.ENV)
                    except (KeyError, AttributeError, TypeError, Unmapped):
                        got = "mapped"
                    self.assertIsNotNone(got, f"`{tool}` is neither a declared read nor mapped")
