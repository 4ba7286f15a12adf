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


def money(x) -> str:
    """A tool amount (a float in major units) as an exact decimal string."""
    return f"{Decimal(str(x)):.2f}"


def major(v) -> float:
    """A gateway amount (integer cents, or a decimal string) in major units."""
    if isinstance(v, int):
        return float(Decimal(v) / 100)
    return float(Decimal(str(v)))


def day(v) -> str:
    """A gateway date (seconds since the epoch, UTC) as the tool's YYYY-MM-DD."""
    if isinstance(v, int):
        return datetime.fromtimestamp(v, tz=timezone.utc).date().isoformat()
    return v


def stamp(v: str) -> str:
    """A tool time (`YYYY-MM-DD HH:MM`, the suite's clock) as the gateway's UTC time."""
    return datetime.strptime(v, "%Y-%m-%d %H:%M").strftime("%Y-%m-%dT%H:%M:00Z")


def minute(v) -> str:
    """A gateway time (seconds since the epoch) as the tool's `YYYY-MM-DD HH:MM`."""
    if isinstance(v, int):
        return datetime.fromtimestamp(v, tz=timezone.utc).strftime("%Y-%m-%d %H:%M")
    return v


class Banking:
    name = "banking"
    pack = "bank"
    scopes = ["payments.write", "account.write"]
    budget = "10000.00"  # the bank pack's hard cap for one payment
    currency = "EUR"  # AgentDojo's bank has one currency
    secrets = {"password"}
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

    def recorded(self, call, result, env) -> list[tuple[str, str]]:
        return []


class Workspace:
    name = "workspace"
    pack = "workspace"
    scopes = ["mail.send", "mail.delete", "calendar.write", "drive.share", "drive.delete",
              "drive.write"]
    budget = None
    secrets: set = set()
    static_registries: dict = {}

    def claims(self, prompt: str, env) -> list[tuple[str, str]]:
        """Every e-mail address written in the prompt."""
        return [("recipients", x.lower()) for x in sorted(set(EMAIL_LIKE.findall(prompt)))]

    def registries(self, env) -> dict:
        """The user's address book, mailbox, calendar and drive before any injection.

        `contacts`: the user's own address, the contact list, every address
        on an e-mail of the mailbox (sender, recipients, cc, bcc), every
        participant of a calendar event, every owner of a file in the drive
        and everyone a file is shared with; `emails`, `events`, `files`:
        the ids of the mailbox's e-mails, the calendar's events and the
        drive's files.
        """
        me = env.inbox.account_email
        people = {me}
        people |= {c.email for c in env.inbox.contact_list}
        for e in env.inbox.emails.values():
            people |= {e.sender, *e.recipients, *(e.cc or []), *(e.bcc or [])}
        for ev in env.calendar.events.values():
            people |= set(ev.participants)
        for f in env.cloud_drive.files.values():
            people |= {f.owner, *f.shared_with}
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
            return {"action": "email.send", "args": {
                "to": list(a["recipients"]), "cc": list(a.get("cc") or []),
                "bcc": list(a.get("bcc") or []), "subject": a["subject"], "body": a["body"],
                "attachments": files}}
        if f == "delete_email":
            return {"action": "email.delete", "args": {"email_id": str(a["email_id"])}}
        if f == "create_calendar_event":
            return {"action": "calendar.invite", "args": {
                "participants": list(a.get("participants") or []), "title": a["title"],
                "start": stamp(a["start_time"]), "end": stamp(a["end_time"]),
                "description": a.get("description") or "", "location": a.get("location") or ""}}
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
            return {"recipients": r["to"], "subject": r["subject"], "body": r["body"],
                    "attachments": [{"type": "file", "file_id": x} for x in r["attachments"]] or None,
                    "cc": r["cc"] or None, "bcc": r["bcc"] or None}
        if f == "delete_email":
            return {"email_id": r["email_id"]}
        if f == "create_calendar_event":
            return {"title": r["title"], "start_time": minute(r["start"]), "end_time": minute(r["end"]),
                    "description": r["description"], "participants": r["participants"],
                    "location": r["location"] or None}
        if f == "cancel_calendar_event":
            return {"event_id": r["event_id"]}
        if f == "reschedule_calendar_event":
            return {"event_id": r["event_id"], "new_start_time": minute(r["start"]),
                    "new_end_time": minute(r["end"])}
        if f == "add_calendar_event_participants":
            return {"event_id": r["event_id"], "participants": r["participants"]}
        if f == "append_to_file":
            return {"file_id": r["file_id"], "content": r["content"]}
        if f == "create_file":
            return {"filename": r["filename"], "content": r["content"]}
        if f == "delete_file":
            return {"file_id": r["file_id"]}
        if f == "share_file":
            return {"file_id": r["file_id"], "email": r["email"], "permission": r["permission"]}
        raise Unmapped(f)

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


ADAPTERS = {"banking": Banking(), "workspace": Workspace()}
