"""AgentDojo's write tools as pack actions, and back: one adapter per suite.

An adapter says, for its suite: the pack and the mandate's scopes; the
mandate's claims from the user's prompt alone; the registries from the
environment before any injection; the proposal for each write call (None
for a read tool, `Unmapped` for a call no action can express: it never
runs); the tool's arguments from the decision's trusted values; what the
attentive user may confirm in the app (a payee, a correspondent); and the
registry changes the system of record makes after a call it executed.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from decimal import Decimal

EMAIL_LIKE = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}")
IBAN_LIKE = re.compile(r"\b[A-Z]{2}[0-9]{2}[A-Z0-9]{10,30}\b")


class Unmapped(Exception):
    """A write call no action of the pack expresses: refused, never run."""


class Adapter:
    """What every suite's adapter has unless it says otherwise."""

    budget: str | None = None  # the mandate's budget (none: no money moves)
    secrets: frozenset = frozenset()  # arguments never written to results/
    # registry -> a file of this folder's `registries/`: the world's data
    # that AgentDojo's environment does not hold (a sanctions list)
    static_registries: dict = {}
    # The suite's read-only tools, run without a decision. Declared, never
    # inferred: a tool that is neither here nor mapped by `to_proposal` is
    # refused (`proposal`), so a write tool an adapter forgot never runs
    # undecided.
    reads: frozenset = frozenset()

    def to_proposal(self, call, env) -> dict | None:
        return None

    def proposal(self, call, env) -> dict | None:
        """The call as a gateway proposal; None only for a declared read."""
        if call.function in self.reads:
            return None
        p = self.to_proposal(call, env)
        if p is None:
            raise Unmapped(f"`{call.function}` is not a declared read and no action of the pack expresses it")
        return p

    def confirmable(self, proposal: dict) -> list[tuple[str, str]]:
        return []

    def recorded(self, call, result, env) -> list[tuple[str, str]]:
        return []


def emails_in(text: str) -> list[str]:
    """Every e-mail address written in a text, lower-cased."""
    return sorted({x.lower() for x in EMAIL_LIKE.findall(text)})


def renamed(r: dict, names: dict[str, str]) -> dict:
    """A tool's arguments from the decision's values: tool argument <- parameter."""
    return {arg: r[param] for arg, param in names.items()}


def mail_args(a: dict) -> dict:
    """`send_email`'s addresses and text as an e-mail action's parameters."""
    return {"to": list(a["recipients"]), "cc": list(a.get("cc") or []),
            "bcc": list(a.get("bcc") or []), "subject": a["subject"], "body": a["body"]}


def mail_back(r: dict) -> dict:
    return {"recipients": r["to"], "subject": r["subject"], "body": r["body"],
            "cc": r["cc"] or None, "bcc": r["bcc"] or None}


def event_args(a: dict) -> dict:
    """`create_calendar_event`'s arguments as an event action's parameters."""
    return {"participants": list(a.get("participants") or []), "title": a["title"],
            "start": stamp(a["start_time"]), "end": stamp(a["end_time"]),
            "description": a.get("description") or "", "location": a.get("location") or ""}


def event_back(r: dict) -> dict:
    return {"title": r["title"], "start_time": minute(r["start"]), "end_time": minute(r["end"]),
            "description": r["description"], "participants": r["participants"],
            "location": r["location"] or None}


MONTHS = ["january", "february", "march", "april", "may", "june", "july", "august",
          "september", "october", "november", "december"]
_MONTH = "(" + "|".join(MONTHS) + ")"
_DAY = r"(\d{1,2})(?:st|nd|rd|th)?"
# "January 11th", "January 11th, 2025", "the 13th of May 2024", "11 January 2025"
_MONTH_DAY = re.compile(_MONTH + r"\s+" + _DAY + r"\b(?:,?\s+(\d{4}))?", re.I)
_DAY_MONTH = re.compile(r"\b" + _DAY + r"\s+(?:of\s+)?" + _MONTH + r"\b(?:,?\s+(\d{4}))?", re.I)
_ISO_DAY = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")


def days_in(prompt: str) -> list[str]:
    """Every day the prompt names, as `YYYY-MM-DD`. A day written without its
    year takes the next year written after it ("January 11th to January
    15th 2025"), else none: a day whose year the user did not say is not
    named."""
    found = []  # (position, month, day, year or None)
    for m in _MONTH_DAY.finditer(prompt):
        found.append((m.start(), MONTHS.index(m.group(1).lower()) + 1, int(m.group(2)), m.group(3)))
    for m in _DAY_MONTH.finditer(prompt):
        found.append((m.start(), MONTHS.index(m.group(2).lower()) + 1, int(m.group(1)), m.group(3)))
    years = [(m.start(), m.group(0)) for m in re.finditer(r"\b(19|20)\d{2}\b", prompt)]
    out = set()
    for pos, month, d, year in found:
        year = year or next((y for p, y in years if p > pos), None)
        if year is None:
            continue
        try:
            out.add(datetime(int(year), month, d).strftime("%Y-%m-%d"))
        except ValueError:
            continue
    for m in _ISO_DAY.finditer(prompt):
        try:
            out.add(datetime(int(m.group(1)), int(m.group(2)), int(m.group(3))).strftime("%Y-%m-%d"))
        except ValueError:
            continue
    return sorted(out)


def correspondents(me: str, inbox, drive=None) -> set[str]:
    """The people the user writes to, from what she sent: her own address,
    everyone on an e-mail she sent (to, cc, bcc) and everyone she shared one
    of her own files with.

    Not the contact list (AgentDojo builds it from every address of the
    mailbox, the senders of received mail included), not a sender who only
    wrote to her (the benchmark's phishing mail comes from such senders),
    not a calendar participant (an event does not say who invited whom), not
    the owner of a file shared with her. Anyone else is reached by naming
    them in the request, or by the user's confirmation."""
    people = {me}
    for e in inbox.emails.values():
        if e.sender.lower() == inbox.account_email.lower():
            people |= {*e.recipients, *(e.cc or []), *(e.bcc or [])}
    for f in (drive.files.values() if drive is not None else []):
        if f.owner.lower() == me.lower():
            people |= set(f.shared_with)
    return people


def money(x) -> str:
    """A tool amount (a float in major units) as an exact decimal string."""
    return f"{Decimal(str(x)):.2f}"


def major(v) -> float:
    """A gateway amount (integer cents, or a decimal string) in major units."""
    if isinstance(v, int):
        return float(Decimal(v) / 100)
    return float(Decimal(str(v)))


def day(v) -> str:
    """A gateway date (`YYYY-MM-DD`, or a UTC time `YYYY-MM-DDTHH:MM:SSZ`, as
    a decision shows it; seconds since the epoch, as a receipt keeps it) as
    the tool's YYYY-MM-DD."""
    if isinstance(v, int):
        return datetime.fromtimestamp(v, tz=timezone.utc).date().isoformat()
    if isinstance(v, str) and len(v) > 10 and v[10] == "T":
        return v[:10]
    return v


def stamp(v: str) -> str:
    """A tool time (`YYYY-MM-DD HH:MM`, the suite's clock) as the gateway's UTC time."""
    return datetime.strptime(v, "%Y-%m-%d %H:%M").strftime("%Y-%m-%dT%H:%M:00Z")


def minute(v) -> str:
    """A gateway time (`YYYY-MM-DDTHH:MM:SSZ`, as a decision shows it; seconds
    since the epoch, as a receipt keeps it) as the tool's `YYYY-MM-DD HH:MM`."""
    if isinstance(v, int):
        return datetime.fromtimestamp(v, tz=timezone.utc).strftime("%Y-%m-%d %H:%M")
    if isinstance(v, str) and v.endswith("Z") and "T" in v:
        return datetime.strptime(v, "%Y-%m-%dT%H:%M:%SZ").strftime("%Y-%m-%d %H:%M")
    return v


class Banking(Adapter):
    reads = frozenset({
        "get_balance",
        "get_iban",
        "get_most_recent_transactions",
        "get_scheduled_transactions",
        "get_user_info",
        "read_file",
    })
    name = "banking"
    pack = "bank"
    scopes = ["payments.write", "account.write"]
    budget = "10000.00"  # the bank pack's hard cap for one payment
    currency = "EUR"  # AgentDojo's bank has one currency
    secrets = frozenset({"password"})
    # AgentDojo's bank has no sanctions list. The pack's sample list names
    # the textbook IBAN GB29 NWBK 6016 1331 9268 19, which AgentDojo gives
    # the user's friend (user task 3): its world gets a list of its own
    static_registries = {"sanctions": "sanctions.json"}

    def claims(self, prompt: str, env) -> list[tuple[str, str]]:
        """The user's own account, the currency, every account number in the prompt."""
        out = [("account", env.bank_account.iban), ("currency", self.currency)]
        return out + [("recipient", x) for x in sorted(set(IBAN_LIKE.findall(prompt)))]

    def registries(self, env) -> dict:
        own = env.bank_account.iban
        seen = set()
        for t in list(env.bank_account.transactions) + list(env.bank_account.scheduled_transactions):
            for x in (t.sender, t.recipient):
                if x not in ("me", own):
                    seen.add(x)
        scheduled = {str(t.id): {"account": own, "recipient": t.recipient, "amount": money(t.amount)}
                     for t in env.bank_account.scheduled_transactions}
        return {"counterparties": sorted(seen), "scheduled": scheduled,
                "beneficiaries": None, "standing_orders": None}

    def to_proposal(self, call, env) -> dict | None:
        f, a = call.function, dict(call.args)
        own = env.bank_account.iban
        if f == "send_money":
            return {"action": "payment.send", "args": {
                "from_account": own, "recipient": a["recipient"], "amount": money(a["amount"]),
                "currency": self.currency, "subject": a["subject"], "date": a["date"]}}
        if f == "schedule_transaction":
            return {"action": "payment.schedule", "args": {
                "from_account": own, "recipient": a["recipient"], "amount": money(a["amount"]),
                "currency": self.currency, "subject": a["subject"], "date": a["date"],
                "recurring": bool(a["recurring"])}}
        if f == "update_scheduled_transaction":
            # an absent (or falsy: the tool ignores it) field means
            # "unchanged": the proposal carries the payment's current value,
            # which the gateway must vouch for like any other
            cur = next((t for t in env.bank_account.scheduled_transactions if t.id == a["id"]), None)

            def keep(k):
                v = a.get(k)
                return v if v else (getattr(cur, k) if cur else v)
            return {"action": "scheduled.update", "args": {
                "id": str(a["id"]), "recipient": keep("recipient"), "amount": money(keep("amount") or 0),
                "subject": keep("subject") or "", "date": keep("date") or "",
                "recurring": bool(keep("recurring"))}}
        if f == "update_password":
            return {"action": "user.update_password", "args": {"new_password": a["password"]}}
        if f == "update_user_info":
            return {"action": "user.update_info", "args": {
                k: a.get(k) or "" for k in ("first_name", "last_name", "street", "city")}}
        return None

    def from_resolved(self, call, resolved: dict) -> dict:
        f, a = call.function, dict(call.args)
        if f in ("send_money", "schedule_transaction"):
            out = {"recipient": resolved["recipient"], "amount": major(resolved["amount"]),
                   "subject": resolved["subject"], "date": day(resolved["date"])}
            if f == "schedule_transaction":
                out["recurring"] = resolved["recurring"]
            return out
        if f == "update_scheduled_transaction":
            return {"id": int(resolved["id"]), "recipient": resolved["recipient"],
                    "amount": major(resolved["amount"]), "subject": resolved["subject"] or None,
                    "date": day(resolved["date"]) or None, "recurring": resolved["recurring"]}
        if f == "update_password":
            # `new_password` is a secret: the decision holds a commitment,
            # never the value. It is not a critical value (nothing trusted
            # to compare it with), so the tool runs with the agent's own
            # value, which the gateway checked (length) and committed to.
            return {"password": a["password"]}
        if f == "update_user_info":
            return {k: resolved.get(k) or None for k in ("first_name", "last_name", "street", "city")}
        return a

    def confirmable(self, proposal: dict) -> list[tuple[str, str]]:
        """A payee of a payment the user asked for, confirmed in the bank app."""
        if proposal["action"] in ("payment.send", "payment.schedule"):
            return [("counterparties", proposal["args"]["recipient"])]
        return []


class Workspace(Adapter):
    reads = frozenset({
        "get_current_day",
        "get_day_calendar_events",
        "get_draft_emails",
        "get_file_by_id",
        "get_received_emails",
        "get_sent_emails",
        "get_unread_emails",
        "list_files",
        "search_calendar_events",
        "search_contacts_by_email",
        "search_contacts_by_name",
        "search_emails",
        "search_files",
        "search_files_by_filename",
    })
    name = "workspace"
    pack = "workspace"
    scopes = ["mail.send", "mail.delete", "calendar.write", "drive.share", "drive.delete",
              "drive.write"]

    def claims(self, prompt: str, env) -> list[tuple[str, str]]:
        """Every e-mail address written in the prompt."""
        return [("recipients", x) for x in emails_in(prompt)]

    def registries(self, env) -> dict:
        """The user's mailbox, calendar and drive before any injection.

        `contacts`: the people the user writes to (`correspondents`: her
        address, everyone on a mail she sent, everyone she shared a file
        with); `emails`, `events`, `files`: the ids of the mailbox's
        e-mails, the calendar's events and the drive's files.
        """
        people = correspondents(env.inbox.account_email, env.inbox, env.cloud_drive)
        return {
            "contacts": sorted(p.lower() for p in people),
            "emails": sorted(env.inbox.emails, key=int),
            "events": sorted(env.calendar.events, key=int),
            "files": sorted(env.cloud_drive.files, key=int),
        }

    def to_proposal(self, call, env) -> dict | None:
        f, a = call.function, dict(call.args)
        if f == "send_email":
            files = []
            for att in a.get("attachments") or []:
                if not (isinstance(att, dict) and att.get("type") == "file" and "file_id" in att):
                    # an event pasted as an attachment: no action expresses it
                    raise Unmapped("an attachment that is not a file of the drive")
                files.append(str(att["file_id"]))
            return {"action": "email.send", "args": {**mail_args(a), "attachments": files}}
        if f == "delete_email":
            return {"action": "email.delete", "args": {"email_id": str(a["email_id"])}}
        if f == "create_calendar_event":
            return {"action": "calendar.invite", "args": event_args(a)}
        if f == "cancel_calendar_event":
            return {"action": "calendar.cancel", "args": {"event_id": str(a["event_id"])}}
        if f == "reschedule_calendar_event":
            start = a["new_start_time"]
            end = a.get("new_end_time")
            if end is None:
                # the tool keeps the event's duration: the proposal says so
                ev = env.calendar.events.get(str(a["event_id"]))
                if ev is None:
                    end = start
                else:
                    s = datetime.strptime(start, "%Y-%m-%d %H:%M")
                    end = (s + (ev.end_time - ev.start_time)).strftime("%Y-%m-%d %H:%M")
            return {"action": "calendar.reschedule", "args": {
                "event_id": str(a["event_id"]), "start": stamp(start), "end": stamp(end)}}
        if f == "add_calendar_event_participants":
            return {"action": "calendar.add_participants", "args": {
                "event_id": str(a["event_id"]), "participants": list(a["participants"])}}
        if f == "append_to_file":
            return {"action": "file.append", "args": {"file_id": str(a["file_id"]),
                                                      "content": a["content"]}}
        if f == "create_file":
            return {"action": "file.create", "args": {"filename": a["filename"],
                                                      "content": a["content"]}}
        if f == "delete_file":
            return {"action": "file.delete", "args": {"file_id": str(a["file_id"])}}
        if f == "share_file":
            return {"action": "file.share", "args": {
                "file_id": str(a["file_id"]), "email": a["email"], "permission": str(a["permission"])}}
        return None

    def from_resolved(self, call, r: dict) -> dict:
        f = call.function
        if f == "send_email":
            files = [{"type": "file", "file_id": x} for x in r["attachments"]]
            return {**mail_back(r), "attachments": files or None}
        if f == "delete_email":
            return {"email_id": r["email_id"]}
        if f == "create_calendar_event":
            return event_back(r)
        if f == "reschedule_calendar_event":
            return {"event_id": r["event_id"], "new_start_time": minute(r["start"]),
                    "new_end_time": minute(r["end"])}
        if f in self.BACK:
            return renamed(r, self.BACK[f])
        raise Unmapped(f)

    # the tools whose arguments come back as they are, by parameter name
    BACK = {
        "cancel_calendar_event": {"event_id": "event_id"},
        "add_calendar_event_participants": {"event_id": "event_id", "participants": "participants"},
        "append_to_file": {"file_id": "file_id", "content": "content"},
        "create_file": {"filename": "filename", "content": "content"},
        "delete_file": {"file_id": "file_id"},
        "share_file": {"file_id": "file_id", "email": "email", "permission": "permission"},
    }

    def confirmable(self, proposal: dict) -> list[tuple[str, str]]:
        """Correspondents of a call the user asked for, confirmed in the address book."""
        a = proposal["args"]
        people = []
        for k in ("to", "cc", "bcc", "participants"):
            people += a.get(k) or []
        if proposal["action"] == "file.share":
            people.append(a["email"])
        return [("contacts", p.lower()) for p in people]

    def recorded(self, call, result, env) -> list[tuple[str, str]]:
        """A file the drive created for the user is the user's file from then on."""
        if call.function == "create_file" and getattr(result, "id_", None) is not None:
            return [("files", str(result.id_))]
        return []


# A web address as written in a message: an optional scheme, dotted labels
# ending in a top-level label in one case (`www.x.com.They` is `www.x.com`;
# a shouted `WWW.X.COM` is a link too), an optional path up to a space or
# closing punctuation.
URL_LIKE = re.compile(r"(?:https?://)?[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.(?:[a-z]{2,}|[A-Z]{2,})\b"
                      r"(?:/[^\s,;!?)\"'<>]*)?")


def links(text: str) -> list[str]:
    """Every web address written in a text (an e-mail address's domain is not one)."""
    out = []
    for m in URL_LIKE.finditer(text or ""):
        if m.start() > 0 and text[m.start() - 1] == "@":
            continue
        out.append(m.group(0).rstrip("."))
    return sorted(set(out))


class Slack(Adapter):
    reads = frozenset({
        "get_channels",
        "get_users_in_channel",
        "read_channel_messages",
        "read_inbox",
    })
    name = "slack"
    pack = "slack"
    scopes = ["chat.write", "chat.admin", "web.read", "web.write"]

    def claims(self, prompt: str, env) -> list[tuple[str, str]]:
        """Every web address and every e-mail address written in the prompt."""
        return ([("sites", x) for x in links(prompt)]
                + [("emails", x) for x in emails_in(prompt)])

    def registries(self, env) -> dict:
        """The workspace before any injection.

        `members` and `channels` as the workspace lists them; `sites`: every
        web address written in a channel message or a direct message;
        `invitees`: nobody (the user confirms each new person).
        """
        sl = env.slack
        texts = [m.body for ms in sl.channel_inbox.values() for m in ms]
        texts += [m.body for ms in sl.user_inbox.values() for m in ms]
        sites = sorted({u for t in texts for u in links(t)})
        return {"members": list(sl.users), "channels": list(sl.channels), "sites": sites,
                "invitees": []}

    def to_proposal(self, call, env) -> dict | None:
        f, a = call.function, dict(call.args)
        if f == "send_direct_message":
            return {"action": "message.direct", "args": {
                "recipient": a["recipient"], "body": a["body"], "links": links(a["body"])}}
        if f == "send_channel_message":
            return {"action": "message.channel", "args": {
                "channel": a["channel"], "body": a["body"], "links": links(a["body"])}}
        if f == "add_user_to_channel":
            return {"action": "channel.add_member", "args": {"user": a["user"], "channel": a["channel"]}}
        if f == "invite_user_to_slack":
            return {"action": "member.invite", "args": {"user": a["user"], "email": a["user_email"]}}
        if f == "remove_user_from_slack":
            return {"action": "member.remove", "args": {"user": a["user"]}}
        if f == "get_webpage":
            # a visit is a request that leaves the workspace: the address
            # (and what it carries) is the attacker's channel out
            return {"action": "web.fetch", "args": {"url": a["url"]}}
        if f == "post_webpage":
            return {"action": "web.post", "args": {"url": a["url"], "content": a["content"]}}
        return None

    def from_resolved(self, call, r: dict) -> dict:
        if call.function in self.BACK:
            return renamed(r, self.BACK[call.function])
        raise Unmapped(call.function)

    BACK = {
        "send_direct_message": {"recipient": "recipient", "body": "body"},
        "send_channel_message": {"channel": "channel", "body": "body"},
        "add_user_to_channel": {"user": "user", "channel": "channel"},
        "invite_user_to_slack": {"user": "user", "user_email": "email"},
        "remove_user_from_slack": {"user": "user"},
        "get_webpage": {"url": "url"},
        "post_webpage": {"url": "url", "content": "content"},
    }

    def confirmable(self, proposal: dict) -> list[tuple[str, str]]:
        """What the user confirms in the app for a call they asked for: the new
        colleague's address, a member, a channel, a web address."""
        a = proposal["args"]
        out = [("sites", x) for x in a.get("links", [])]
        if proposal["action"] == "member.invite":
            out.append(("invitees", a["email"].lower()))
        if "user" in a and proposal["action"] != "member.invite":
            out.append(("members", a["user"]))
        if "recipient" in a:
            out.append(("members", a["recipient"]))
        if "channel" in a:
            out.append(("channels", a["channel"]))
        if proposal["action"] == "web.fetch":
            out.append(("sites", a["url"]))
        return out

    def recorded(self, call, result, env) -> list[tuple[str, str]]:
        """An invited person is a member of the workspace from then on."""
        if call.function == "invite_user_to_slack":
            return [("members", dict(call.args)["user"])]
        return []


# A name the user quoted: between single or double quotes that are not an
# apostrophe inside a word (`I'm`, `Sarah's`).
QUOTED = re.compile(r"""(?<![A-Za-z])(?:'([^'\n]{1,100})'|"([^"\n]{1,100})")(?![A-Za-z])""")


def quoted(text: str) -> list[str]:
    return sorted({a or b for a, b in QUOTED.findall(text)})


class Travel(Adapter):
    reads = frozenset({
        "check_restaurant_opening_hours",
        "get_all_car_rental_companies_in_city",
        "get_all_hotels_in_city",
        "get_all_restaurants_in_city",
        "get_car_fuel_options",
        "get_car_price_per_day",
        "get_car_rental_address",
        "get_car_types_available",
        "get_contact_information_for_restaurants",
        "get_cuisine_type_for_restaurants",
        "get_day_calendar_events",
        "get_dietary_restrictions_for_all_restaurants",
        "get_flight_information",
        "get_hotels_address",
        "get_hotels_prices",
        "get_price_for_restaurants",
        "get_rating_reviews_for_car_rental",
        "get_rating_reviews_for_hotels",
        "get_rating_reviews_for_restaurants",
        "get_restaurants_address",
        "get_user_information",
        "search_calendar_events",
    })
    name = "travel"
    pack = "travel"
    scopes = ["booking.write", "mail.send", "calendar.write"]

    def claims(self, prompt: str, env) -> list[tuple[str, str]]:
        """Every name the user quoted (a hotel, a restaurant, a company), every
        e-mail address, and every day the user named ("from January 11th to
        January 15th 2025"). No times and no party size: no user task of the
        suite names a time to book at, and its tools take no party size (a
        rental or a table then waits for the user's confirmation)."""
        return ([("places", x) for x in quoted(prompt)]
                + [("recipients", x) for x in emails_in(prompt)]
                + [("days", x) for x in days_in(prompt)])

    def registries(self, env) -> dict:
        """`contacts`: the people the user writes to (`correspondents`: her
        address, everyone on a mail she sent); `events`: the calendar's events."""
        people = correspondents(env.inbox.account_email, env.inbox)
        return {"contacts": sorted(p.lower() for p in people),
                "events": sorted(env.calendar.events, key=int)}

    def to_proposal(self, call, env) -> dict | None:
        f, a = call.function, dict(call.args)
        if f == "reserve_hotel":
            return {"action": "booking.hotel", "args": {
                "hotel": a["hotel"], "start": a["start_day"], "end": a["end_day"]}}
        if f == "reserve_car_rental":
            return {"action": "booking.car", "args": {
                "company": a["company"], "start": stamp(a["start_time"]),
                "end": stamp(a["end_time"]) if a.get("end_time") else stamp(a["start_time"])}}
        if f == "reserve_restaurant":
            return {"action": "booking.restaurant", "args": {
                "restaurant": a["restaurant"], "start": stamp(a["start_time"])}}
        if f == "send_email":
            if a.get("attachments"):
                raise Unmapped("an attachment (the travel pack sends text only)")
            return {"action": "trip.send_email", "args": mail_args(a)}
        if f == "create_calendar_event":
            return {"action": "trip.remind", "args": event_args(a)}
        if f == "cancel_calendar_event":
            return {"action": "trip.cancel_event", "args": {"event_id": str(a["event_id"])}}
        return None

    def from_resolved(self, call, r: dict) -> dict:
        f, a = call.function, dict(call.args)
        if f == "reserve_hotel":
            return {"hotel": r["hotel"], "start_day": day(r["start"]), "end_day": day(r["end"])}
        if f == "reserve_car_rental":
            out = {"company": r["company"], "start_time": minute(r["start"])}
            if a.get("end_time"):
                out["end_time"] = minute(r["end"])
            return out
        if f == "reserve_restaurant":
            return {"restaurant": r["restaurant"], "start_time": minute(r["start"])}
        if f == "send_email":
            return mail_back(r)
        if f == "create_calendar_event":
            return {**event_back(r), "participants": r["participants"] or None}
        if f == "cancel_calendar_event":
            return {"event_id": r["event_id"]}
        raise Unmapped(f)


ADAPTERS = {"banking": Banking(), "workspace": Workspace(), "slack": Slack(), "travel": Travel()}
