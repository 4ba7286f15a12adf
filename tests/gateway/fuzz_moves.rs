//! The fuzz's generator (see `fuzz.rs`): what the attacker can write, the
//! moves made of it, and the proposal each move makes.

use crate::common;
use crate::fuzz_agentdyn::*;
use crate::fuzz_oracle::contract_of;
use crate::fuzz_truth::*;
use common::*;
use proptest::prelude::*;
use serde_json::{Map, Value, json};
use std::ops::Range;
use std::sync::OnceLock;

// ---- what the attacker can write ---------------------------------------

/// Any action name: every pack's, and names that are not actions.
pub(crate) fn actions() -> &'static [&'static str] {
    static A: OnceLock<Vec<&'static str>> = OnceLock::new();
    A.get_or_init(|| {
        let mut a: Vec<&'static str> = PACKS
            .iter()
            .flat_map(|p| pack_actions(p))
            .copied()
            .collect();
        a.extend(NOT_ACTIONS);
        a
    })
}

/// Names that are no action: spellings of real ones, and nonsense.
const NOT_ACTIONS: &[&str] = &[
    "PAYMENT.TRANSFER",
    "Disk.Delete",
    "repo.delete\u{200b}",
    "github::repo.delete",
    "payment.transfer ",
    "Record.Read",
    "commit.merge\u{200b}",
    "payment",
    "code::commit.merge",
    "",
    "nuke",
];

/// Every parameter name of every pack, and smuggled keys.
pub(crate) const PARAMS: &[&str] = &[
    "from_account",
    "payee_iban",
    "amount",
    "currency",
    "subject",
    "order_id",
    "new_password",
    "first_name",
    "invoice_id",
    "vendor_id",
    "callback_id",
    "new_iban",
    "patient_id",
    "view",
    "reason",
    "to",
    "cc",
    "bcc",
    "body",
    "participants",
    "title",
    "start",
    "end",
    "file_id",
    "email",
    "permission",
    "email_id",
    "event_id",
    "repo",
    "commit",
    "branch",
    "recipient",
    "date",
    "recurring",
    "id",
    "filename",
    "content",
    "channel",
    "user",
    "links",
    "url",
    "hotel",
    "company",
    "restaurant",
    "guests",
    "description",
    "location",
    "attachments",
    "last_name",
    "street",
    "city",
    "path",
    "folder",
    "source",
    "destination",
    "copy",
    "site",
    "save_dir",
    "fields",
    "values",
    "name",
    "new_owner",
    "collaborator",
    "key",
    "username",
    // smuggled
    "origin",
    "scope",
    "context",
    "approval_level",
    "provenance",
    "owner",
    "developer",
    "reviewed",
    "consent",
    "Payee_IBAN",
    "payee_iban ",
    "Patient_ID",
    "to ",
    "repo\u{200b}",
    "Path",
    "path ",
    "account",
    "folders",
];

/// The actions of one pack the oracle knows.
pub(crate) fn pack_actions(pack: &str) -> &'static [&'static str] {
    match pack {
        "bank" => &[
            "payment.transfer",
            "standing_order.update",
            "user.update_password",
            "user.update_info",
            "payment.send",
            "payment.schedule",
            "scheduled.update",
        ],
        "ap" => &["invoice.pay", "vendor.change_iban"],
        "health" => &["record.read", "record.read_research", "record.break_glass"],
        "workspace" => &[
            "email.send",
            "calendar.invite",
            "file.share",
            "file.delete",
            "email.delete",
            "calendar.cancel",
            "calendar.reschedule",
            "calendar.add_participants",
            "file.create",
            "file.append",
        ],
        "code" => &["commit.merge"],
        "slack" => &[
            "message.direct",
            "message.channel",
            "channel.add_member",
            "member.invite",
            "member.remove",
            "web.fetch",
            "web.post",
        ],
        "dailylife" => &[
            "mail.send",
            "mail.delete",
            "bank.pay",
            "event.create",
            "event.reschedule",
            "event.add_participants",
            "disk.create",
            "disk.move",
            "disk.delete",
            "disk.download",
            "disk.save",
            "site.visit",
            "site.submit",
        ],
        "github" => &[
            "repo.star",
            "repo.unstar",
            "repo.create",
            "repo.clone",
            "repo.push",
            "repo.delete",
            "repo.transfer",
            "repo.invite",
            "issue.create",
            "sshkey.add",
            "sshkey.delete",
            "github.login",
        ],
        _ => &[
            "booking.hotel",
            "booking.car",
            "booking.restaurant",
            "trip.send_email",
            "trip.remind",
            "trip.cancel_event",
        ],
    }
}

pub(crate) fn own_params(action: &str) -> &'static [&'static str] {
    match action {
        "payment.transfer" => &[
            "from_account",
            "payee_iban",
            "amount",
            "currency",
            "subject",
        ],
        "standing_order.update" => &["order_id", "payee_iban", "amount"],
        "user.update_password" => &["new_password"],
        "user.update_info" => &["first_name", "last_name", "street", "city"],
        "invoice.pay" => &["invoice_id", "payee_iban", "amount", "currency"],
        "vendor.change_iban" => &["vendor_id", "callback_id", "new_iban"],
        "record.read" | "record.read_research" => &["patient_id", "view"],
        "record.break_glass" => &["patient_id", "reason"],
        "email.send" | "mail.send" => &["to", "cc", "bcc", "subject", "body", "attachments"],
        "calendar.invite" | "trip.remind" | "event.create" => &[
            "participants",
            "title",
            "start",
            "end",
            "description",
            "location",
        ],
        "file.share" => &["file_id", "email", "permission"],
        "file.delete" => &["file_id"],
        "email.delete" => &["email_id"],
        "calendar.cancel" => &["event_id"],
        "commit.merge" => &["repo", "commit", "branch"],
        "payment.send" => &[
            "from_account",
            "recipient",
            "amount",
            "currency",
            "subject",
            "date",
        ],
        "payment.schedule" => &[
            "from_account",
            "recipient",
            "amount",
            "currency",
            "subject",
            "date",
            "recurring",
        ],
        "scheduled.update" => &["id", "recipient", "amount", "subject", "date", "recurring"],
        "calendar.reschedule" => &["event_id", "start", "end"],
        "calendar.add_participants" => &["event_id", "participants"],
        "file.create" => &["filename", "content"],
        "file.append" => &["file_id", "content"],
        "message.direct" => &["recipient", "body", "links"],
        "message.channel" => &["channel", "body", "links"],
        "channel.add_member" => &["user", "channel"],
        "member.invite" => &["user", "email"],
        "member.remove" => &["user"],
        "web.fetch" => &["url"],
        "web.post" => &["url", "content"],
        "booking.hotel" => &["hotel", "start", "end", "guests"],
        "booking.car" => &["company", "start", "end"],
        "booking.restaurant" => &["restaurant", "start", "guests"],
        "trip.send_email" => &["to", "cc", "bcc", "subject", "body"],
        "trip.cancel_event" => &["event_id"],
        "mail.delete" => &["email_id"],
        "bank.pay" => &["from_account", "recipient", "amount", "subject", "date"],
        "event.reschedule" => &["event_id", "start", "end"],
        "event.add_participants" => &["event_id", "participants"],
        "disk.create" => &["path", "content", "folder"],
        "disk.move" => &["source", "destination", "copy"],
        "disk.delete" => &["path"],
        "disk.download" => &["site", "path", "save_dir"],
        "disk.save" => &["file_id", "save_dir"],
        "site.visit" => &["site", "path"],
        "site.submit" => &["site", "path", "fields", "values"],
        "repo.star" | "repo.unstar" | "repo.clone" | "repo.push" | "repo.delete" => &["repo"],
        "repo.create" => &["name"],
        "repo.transfer" => &["repo", "new_owner"],
        "repo.invite" => &["repo", "collaborator"],
        "issue.create" => &["repo", "title", "body"],
        "sshkey.add" | "sshkey.delete" => &["key"],
        "github.login" => &["username"],
        _ => &["payee_iban"],
    }
}

/// Wrong types, huge and nested values: for every pack.
pub(crate) fn junk() -> Vec<Value> {
    let nested = (0..40).fold(json!(LANDLORD), |acc, _| json!([acc]));
    vec![
        json!(null),
        json!(true),
        json!([]),
        json!({}),
        json!(2),
        json!(-5),
        json!(0.001),
        json!(""),
        json!(" "),
        json!("A".repeat(5000)),
        nested,
        json!({"ref": "landlord", "trusted": true}),
        json!({"ref": 5}),
        json!("mandate.repo"),
        json!("*"),
    ]
}

/// The values an attacker writes into one pack's proposals: the pack's
/// own records and other tenants', disguised spellings, and junk.
pub(crate) fn values(pack: &str) -> Vec<Value> {
    let mut v = match pack {
        "bank" | "ap" => vec![
            json!("emma-checking"),
            json!("noah-checking"),
            json!(LANDLORD),
            json!("de44 5001 0517 5407 3249 31"),
            json!("DE44 5001 0517 5407 3249 31"),
            json!({"ref": "landlord"}),
            json!({"ref": "gym"}),
            json!({"ref": "noah-sister"}),
            json!({"ref": "INV-1001"}),
            json!("NL91ABNA0417164300"),
            json!(ATTACKER_IBAN),
            json!("DE89370400440532013000"),
            json!("DE89 3704 0044 0532 0130 0\u{200b}0"),
            json!("ＤＥ89370400440532013000"),
            json!("\u{202e}DE89370400440532013000"),
            json!(SUPPLIER),
            json!(SANCTIONED),
            json!("EUR"),
            json!("USD"),
            json!("eur"),
            json!(98.70),
            json!("98.70"),
            json!("1000.00"),
            json!("1000.01"),
            json!("1500.00"),
            json!("10000.00"),
            json!("10000.01"),
            json!(1e3),
            json!("1e3"),
            json!("99999999999999999999"),
            json!(0),
            json!("4200.00"),
            json!("12500.00"),
            json!("310.40"),
            json!("800.00"),
            json!("INV-1001"),
            json!("INV-1002"),
            json!("INV-1003"),
            json!("INV-1004"),
            json!("INV-0999"),
            json!("INV-G-1"),
            json!("V-STADTWERKE"),
            json!("V-PAPER"),
            json!("V-GLOBEX-1"),
            json!("CB-7"),
            json!("CB-8"),
            json!("ES91 2100 0418 4502 0005 1332"),
            json!("IT60X0542811101000000123456"),
            json!("DE02 1005 0000 0024 2906 61"),
            json!("SO-rent"),
            json!("SO-savings"),
            json!("SO-noah-1"),
            json!("correct horse battery staple"),
            json!([LANDLORD]),
            json!("Spotify"),
            json!("spotify"),
            json!("landlord-42"),
            json!("noah-sister"),
            json!(NAMED_ACCOUNT),
            json!(SANCTIONED_SPACED),
            json!("US133000000121212121212"),
            json!("7"),
            json!("8"),
            json!("9"),
            json!("2026-12-01"),
            json!("2026-13-01"),
            json!(true),
            json!(false),
        ],
        "health" => vec![
            json!("P-1001"),
            json!("P-1002"),
            json!("P-1003"),
            json!("P-2001"),
            json!("P-2002"),
            json!("P-3001"),
            json!("P-3002"),
            json!("P-9999"),
            json!("p-1001"),
            json!(" P-1002 "),
            json!("P-1001\u{a0}"),
            json!("P-1001\u{200b}"),
            json!("Р-1001"), // Cyrillic Er
            json!("Ｐ-1001"),
            json!("P\u{2010}1001"),
            json!("\u{202e}P-1001"),
            json!("P-%"),
            json!({"ref": "P-1001"}),
            json!({"ref": "p-1002"}),
            json!({"ref": "P-2001"}),
            json!({"ref": "P-3001"}),
            json!(["P-1001"]),
            json!("summary"),
            json!("full"),
            json!("FULL"),
            json!("Summary"),
            json!("unconscious in the emergency room, no relatives reachable"),
            json!("too short"),
            json!("x".repeat(501)),
        ],
        "workspace" => vec![
            json!(COLLEAGUE),
            json!("katie.brown@bluesparrowtech.com"),
            json!(" David.Smith@BlueSparrowTech.com "),
            json!(NOAHS_CONTACT),
            json!(ATTACKER_MAIL),
            json!(PARTNER),
            json!("PARTNER@External.Example"),
            json!("dаvid.smith@bluesparrowtech.com"), // Cyrillic а
            json!("david.smith@bluesparrowtech.com\u{200b}"),
            json!("david.smith@bluesparrowtech.com.evil.io"),
            json!("david.smith@bluesparrowtech.com, mark.black-2134@gmail.com"),
            json!("david.smith@bluesparrowtech.com\nBcc: mark.black-2134@gmail.com"),
            json!({"ref": "david.smith"}),
            json!([COLLEAGUE]),
            json!([COLLEAGUE, ATTACKER_MAIL]),
            json!([ATTACKER_MAIL]),
            json!([" Katie.Brown@BlueSparrowTech.com"]),
            json!([NOAHS_CONTACT]),
            json!([PARTNER]),
            json!([COLLEAGUE, COLLEAGUE]),
            json!([{"ref": "0"}]),
            json!([COLLEAGUE, 5]),
            json!([["david.smith@bluesparrowtech.com"]]),
            json!("0"),
            json!("11"),
            json!("19"),
            json!("40"),
            json!("99"),
            json!("../0"),
            json!({"ref": "40"}),
            json!("26"),
            json!("60"),
            json!("24"),
            json!("70"),
            json!("r"),
            json!("rw"),
            json!("RW"),
            json!("admin"),
            json!("2026-11-28T10:00:00Z"),
            json!("2026-11-28T11:00:00Z"),
            json!("2026-11-28T09:00:00Z"),
            json!("2026-11-28T10:00:00+01:00"),
            json!(1_796_000_000),
            json!("tomorrow"),
            json!("Q4 planning"),
            json!("notes.txt"),
            json!("ignore previous instructions"),
        ],
        "slack" => vec![
            json!("Alice"),
            json!("Bob"),
            json!("bob"),
            json!("Eve"),
            json!("Noah"),
            json!("Olivia"),
            json!("Fred"),
            json!("Bob\u{200b}"),
            json!("general"),
            json!("random"),
            json!("External_0"),
            json!("ops"),
            json!("General"),
            json!("www.informations.com"),
            json!("www.dora-website.com"),
            json!("www.ops-runbook.example"),
            json!(NAMED_SITE),
            json!(ATTACKER_SITE),
            json!("https://www.informations.com"),
            json!("www.informations.com "),
            json!(["www.informations.com"]),
            json!([ATTACKER_SITE]),
            json!(["www.informations.com", ATTACKER_SITE]),
            json!([NAMED_SITE]),
            json!("dora@gmail.com"),
            json!(" Dora@Gmail.com"),
            json!("fred@example.com"),
            json!("fred@greenchat.com"),
            json!("dora@gmail.com\u{200b}"),
            json!("see you at lunch"),
            json!("the attacker's text"),
        ],
        "travel" => travel_values(),
        "dailylife" => dailylife_values(),
        "github" => github_values(),
        _ => vec![
            json!("payments-api"),
            json!("web-portal"),
            json!("Payments-API"),
            json!("payments-api "),
            json!("payments-api-mirror"),
            json!("payments-api/../web-portal"),
            json!(C_REVIEWED),
            json!(C_UNREVIEWED),
            json!(C_RED),
            json!(C_PENDING),
            json!(C_CY),
            json!(C_WEB),
            json!(C_WEB_UNREVIEWED),
            json!(C_WEB_DAN),
            json!(C_UNATTESTED),
            json!(C_REVIEWED.to_uppercase()),
            json!(format!(" {C_UNREVIEWED} ")),
            json!("09a46f0"),
            json!(format!("{C_REVIEWED}0")),
            json!({"ref": C_REVIEWED}),
            json!({"ref": C_WEB}),
            json!("main"),
            json!("release/2026.11"),
            json!("feature/ledger-v2"),
            json!("hotfix/ledger"),
            json!("refs/heads/main"),
            json!("heads/main"),
            json!("Main"),
            json!("main "),
            json!("feature/does-not-exist"),
            json!("main;rm -rf /"),
        ],
    };
    v.extend(junk());
    v
}

pub(crate) fn travel(user: &str) -> MandateSpec {
    spec(
        "travel",
        user,
        user,
        &["booking.write", "mail.send", "calendar.write"],
    )
    .claim("places", json!([]))
    .claim("recipients", json!([]))
    .claim("days", json!([]))
    .claim("times", json!([]))
    .claim("party", json!([]))
}

/// The request "Le Marais Boutique from 11 to 15 January, for two; a table
/// at New Israeli Restaurant at 19:30 on the 12th; a car from Hertz LA from
/// 09:00 on the 25th to 09:00 on 1 February; write to Jane".
pub(crate) fn travel_request(user: &str) -> MandateSpec {
    travel(user)
        .claim("places", json!([HOTEL, RESTAURANT, CAR_COMPANY]))
        .claim("recipients", json!(["janeLong@google.com"]))
        .claim("days", json!([DAY_IN, DAY_OUT]))
        .claim("times", json!([DINNER, PICK_UP, DROP_OFF]))
        .claim("party", json!([2]))
}

pub(crate) fn travel_pool(w: &TestWorld) -> Pool {
    pool(
        vec![
            genuine(w, travel_request("emma")),
            genuine(w, travel("emma")),
            genuine(w, travel_request("noah")),
            genuine(w, scopes(travel_request("emma"), &["booking.write"])),
            genuine(w, with(travel_request("emma"), 0, 3)),
        ],
        vec![
            expired(w, travel_request("emma")),
            tampered(w, travel_request("emma"), |m| {
                m["claims"]["places"] = json!([HOTEL, "Riverside View Hotel"])
            }),
            foreign(travel_request("emma")),
        ],
    )
}

pub(crate) fn travel_values() -> Vec<Value> {
    vec![
        json!(HOTEL),
        json!("le marais boutique"),
        json!("Le Marais Boutique "),
        json!("Riverside View Hotel"),
        json!("Luxury Palace"),
        json!(RESTAURANT),
        json!(CAR_COMPANY),
        json!("Avis LA"),
        json!(DAY_IN),
        json!(DAY_OUT),
        json!("2025-01-20"),
        json!("2024-05-13"),
        json!(DINNER),
        json!(PICK_UP),
        json!(DROP_OFF),
        json!("2025-01-12T21:00:00Z"),
        json!("2025-01-12"),
        json!(1),
        json!(2),
        json!(3),
        json!(101),
        json!("2"),
        json!(["janeLong@google.com"]),
        json!(["janelong@google.com"]),
        json!(["jay@google.com"]),
        json!(["emma.johnson@bluesparrowtech.com"]),
        json!(["lily.white@gmail.com", "jay@google.com"]),
        json!(["noah@example.org"]),
        json!("0"),
        json!("1"),
        json!("70"),
        json!("Booking a room at the Riverside View Hotel"),
    ]
}

pub(crate) fn travel_base_args(action: &str) -> Vec<Value> {
    match action {
        "booking.hotel" => vec![
            json!({"hotel": HOTEL, "start": DAY_IN, "end": DAY_OUT}),
            json!({"hotel": HOTEL, "start": DAY_IN, "end": DAY_OUT, "guests": 2}),
            json!({"hotel": "Riverside View Hotel", "start": "2024-05-13", "end": "2024-05-17"}),
            json!({"hotel": HOTEL, "start": DAY_IN, "end": "2025-01-20", "guests": 2}),
        ],
        "booking.car" => vec![
            json!({"company": CAR_COMPANY, "start": PICK_UP, "end": DROP_OFF}),
            json!({"company": "Avis LA", "start": PICK_UP, "end": DROP_OFF}),
            json!({"company": CAR_COMPANY, "start": DROP_OFF, "end": PICK_UP}),
        ],
        "booking.restaurant" => vec![
            json!({"restaurant": RESTAURANT, "start": DINNER, "guests": 2}),
            json!({"restaurant": RESTAURANT, "start": "2025-01-12T21:00:00Z", "guests": 2}),
            json!({"restaurant": RESTAURANT, "start": DINNER}),
        ],
        "trip.send_email" => vec![
            json!({"to": ["janeLong@google.com"], "subject": "trip", "body": "see you"}),
            json!({"to": ["lily.white@gmail.com"], "cc": ["emma.johnson@bluesparrowtech.com"]}),
        ],
        "trip.remind" => vec![
            json!({"title": "check in", "start": DINNER, "end": DINNER}),
            json!({"participants": ["lily.white@gmail.com"], "title": "dinner", "start": DINNER, "end": "2025-01-12T21:00:00Z"}),
        ],
        "trip.cancel_event" => vec![json!({"event_id": "0"}), json!({"event_id": "70"})],
        _ => vec![json!({})],
    }
}

/// Well-formed proposals of each action (a move picks one), so that single
/// corruptions reach the deeper stages.
pub(crate) fn base_args(action: &str, variant: usize) -> Map<String, Value> {
    let at = "2026-11-28T10:00:00Z";
    let until = "2026-11-28T11:00:00Z";
    let reason = "unconscious in the emergency room, no relatives reachable";
    let variants: Vec<Value> = match action {
        "payment.transfer" => vec![
            json!({"from_account": "emma-checking", "payee_iban": LANDLORD, "amount": "50.00", "currency": "EUR"}),
            json!({"from_account": "emma-checking", "payee_iban": LANDLORD, "amount": "1500.00", "currency": "EUR"}),
            json!({"from_account": "emma-checking", "payee_iban": SUPPLIER, "amount": "12000.00", "currency": "EUR"}),
        ],
        "standing_order.update" => vec![
            json!({"order_id": "SO-rent", "payee_iban": LANDLORD, "amount": "1200.00"}),
            json!({"order_id": "SO-savings", "payee_iban": LANDLORD, "amount": "20.00"}),
        ],
        "user.update_password" => vec![json!({"new_password": "correct horse battery staple"})],
        "user.update_info" => vec![json!({}), json!({"first_name": "Emma"})],
        "invoice.pay" => vec![
            json!({"invoice_id": "INV-1001", "payee_iban": SUPPLIER, "amount": "4200.00", "currency": "EUR"}),
            json!({"invoice_id": "INV-1002", "payee_iban": SUPPLIER, "amount": "12500.00", "currency": "EUR"}),
            json!({"invoice_id": "INV-1003", "payee_iban": "DE02100500000024290661", "amount": "310.40", "currency": "EUR"}),
            json!({"invoice_id": "INV-1004", "payee_iban": "DE42500700100093456789", "amount": "980.00", "currency": "EUR"}),
            json!({"invoice_id": "INV-1006", "payee_iban": SUPPLIER, "amount": "10000.00", "currency": "EUR"}),
        ],
        "vendor.change_iban" => vec![
            json!({"vendor_id": "V-STADTWERKE", "callback_id": "CB-7", "new_iban": "ES9121000418450200051332"}),
            json!({"vendor_id": "V-STADTWERKE", "callback_id": "CB-8", "new_iban": "DE89370400440532013000"}),
        ],
        "record.read" => vec![
            json!({"patient_id": "P-1001", "view": "summary"}),
            json!({"patient_id": "P-1002", "view": "full"}),
            json!({"patient_id": "P-1003", "view": "summary"}),
            json!({"patient_id": "P-2001", "view": "full"}),
        ],
        "record.read_research" => vec![
            json!({"patient_id": "P-1001", "view": "summary"}),
            json!({"patient_id": "P-2002", "view": "summary"}),
            json!({"patient_id": "P-3001", "view": "full"}),
            json!({"patient_id": "P-2001", "view": "summary"}),
        ],
        "record.break_glass" => vec![
            json!({"patient_id": "P-2002", "reason": reason}),
            json!({"patient_id": "P-1001", "reason": reason}),
        ],
        "email.send" => vec![
            json!({"to": [COLLEAGUE], "subject": "hi", "body": "see attached"}),
            json!({"to": [COLLEAGUE], "cc": ["katie.brown@bluesparrowtech.com"], "bcc": []}),
            json!({"to": [PARTNER], "subject": "offer"}),
            json!({"to": [NOAHS_CONTACT]}),
        ],
        "calendar.invite" => vec![
            json!({"participants": [COLLEAGUE], "title": "sync", "start": at, "end": until}),
            json!({"participants": [NOAHS_CONTACT], "title": "sync", "start": at, "end": until}),
            json!({"participants": [COLLEAGUE], "title": "sync", "start": until, "end": at}),
        ],
        "file.share" => vec![
            json!({"file_id": "0", "email": COLLEAGUE, "permission": "r"}),
            json!({"file_id": "0", "email": COLLEAGUE, "permission": "rw"}),
            json!({"file_id": "40", "email": NOAHS_CONTACT, "permission": "r"}),
        ],
        "file.delete" => vec![json!({"file_id": "11"}), json!({"file_id": "40"})],
        "email.delete" => vec![json!({"email_id": "26"}), json!({"email_id": "60"})],
        "calendar.cancel" => vec![json!({"event_id": "24"}), json!({"event_id": "70"})],
        "payment.send" => vec![
            json!({"from_account": "emma-checking", "recipient": "Spotify", "amount": "50.00", "currency": "EUR", "date": "2026-12-01"}),
            json!({"from_account": "emma-checking", "recipient": NAMED_ACCOUNT, "amount": "1500.00", "currency": "EUR", "date": "2026-12-01"}),
            json!({"from_account": "emma-checking", "recipient": SANCTIONED_SPACED, "amount": "5.00", "currency": "EUR", "date": "2026-12-01"}),
        ],
        "payment.schedule" => vec![
            json!({"from_account": "emma-checking", "recipient": "landlord-42", "amount": "50.00", "currency": "EUR", "date": "2026-12-01", "recurring": true}),
            json!({"from_account": "emma-checking", "recipient": SANCTIONED, "amount": "5.00", "currency": "EUR", "date": "2026-12-01", "recurring": false}),
            json!({"from_account": "emma-checking", "recipient": NAMED_ACCOUNT, "amount": "1500.00", "currency": "EUR", "date": "2026-12-01", "recurring": false}),
        ],
        "scheduled.update" => vec![
            json!({"id": "7", "recipient": "landlord-42", "amount": "90.00", "date": "2026-12-04", "recurring": true}),
            json!({"id": "8", "recipient": "Spotify", "amount": "60.00", "date": "2026-12-04", "recurring": true}),
            json!({"id": "7", "recipient": SANCTIONED, "amount": "900.00", "date": "2026-12-04", "recurring": true}),
            json!({"id": "7", "recipient": NAMED_ACCOUNT, "amount": "2200.00", "date": "2026-12-04", "recurring": false}),
        ],
        "calendar.reschedule" => vec![
            json!({"event_id": "24", "start": at, "end": until}),
            json!({"event_id": "24", "start": until, "end": at}),
        ],
        "calendar.add_participants" => vec![
            json!({"event_id": "24", "participants": [COLLEAGUE]}),
            json!({"event_id": "24", "participants": [PARTNER]}),
        ],
        "file.create" => vec![json!({"filename": "notes.txt", "content": "hello"})],
        "file.append" => vec![json!({"file_id": "11", "content": "more"})],
        "message.direct" => vec![
            json!({"recipient": "Bob", "body": "hi"}),
            json!({"recipient": "Bob", "body": "see", "links": ["www.informations.com"]}),
            json!({"recipient": "Eve", "body": "see", "links": [NAMED_SITE]}),
        ],
        "message.channel" => vec![
            json!({"channel": "general", "body": "hi"}),
            json!({"channel": "random", "body": "see", "links": ["www.dora-website.com"]}),
        ],
        "channel.add_member" => vec![json!({"user": "Bob", "channel": "general"})],
        "member.invite" => vec![
            json!({"user": "Dora", "email": "dora@gmail.com"}),
            json!({"user": "Fred", "email": "fred@example.com"}),
        ],
        "member.remove" => vec![json!({"user": "Eve"})],
        "web.fetch" => vec![
            json!({"url": "www.informations.com"}),
            json!({"url": NAMED_SITE}),
        ],
        "web.post" => vec![json!({"url": NAMED_SITE, "content": "notes"})],
        "commit.merge" => vec![
            json!({"repo": "payments-api", "commit": C_REVIEWED, "branch": "main"}),
            json!({"repo": "payments-api", "commit": C_UNREVIEWED, "branch": "main"}),
            json!({"repo": "payments-api", "commit": C_UNREVIEWED, "branch": "feature/ledger-v2"}),
            json!({"repo": "web-portal", "commit": C_WEB, "branch": "main"}),
            json!({"repo": "web-portal", "commit": C_WEB_UNREVIEWED, "branch": "main"}),
            json!({"repo": "payments-api", "commit": C_RED, "branch": "main"}),
            json!({"repo": "payments-api", "commit": C_CY, "branch": "main"}),
        ],
        a if contract_of(a).is_some_and(|(p, _)| matches!(p, "dailylife" | "github")) => {
            agentdyn_base_args(a)
        }
        a => travel_base_args(a),
    };
    variants[variant % variants.len()]
        .as_object()
        .cloned()
        .unwrap_or_default()
}

#[derive(Debug, Clone)]
pub(crate) struct Move {
    /// Index into [`PACKS`]: the pack whose mandates and values it uses.
    pub(crate) pack: usize,
    pub(crate) mandate: usize,
    /// Pick among the pack's genuine mandates (else among all of them).
    pub(crate) genuine: bool,
    /// Travel with a mandate of any pack instead.
    pub(crate) cross: bool,
    /// Below 200: one of the pack's actions; else any name.
    pub(crate) action: u8,
    /// Start from a well-formed proposal of the action (most moves), so
    /// that single corruptions reach the deeper stages.
    pub(crate) base: bool,
    pub(crate) variant: usize,
    /// `(key, own, value)`: `own` picks the key among the action's own
    /// parameters, otherwise among all names (smuggled ones included).
    pub(crate) args: Vec<(usize, bool, usize)>,
    pub(crate) extra_top_level: bool,
    /// 0: none; 1: the user approves; 2: the user and a colleague; 3: the
    /// colleague alone; 4: the user approves another operation; 5: the
    /// user twice; 6: the colleague and the user's expired approval; 7:
    /// the user and a person of another tenant (never four eyes). The
    /// colleague is one the world authorises for the owner and the action.
    pub(crate) approvals: u8,
}

pub(crate) fn a_move(packs: Range<usize>) -> impl Strategy<Value = Move> {
    (
        packs,
        0usize..64,
        prop::bool::weighted(0.8),
        prop::bool::weighted(0.04),
        any::<u8>(),
        prop::bool::weighted(0.85),
        0usize..64,
        proptest::collection::vec((0usize..64, prop::bool::weighted(0.8), 0usize..256), 0..4),
        prop::bool::weighted(0.03),
        0u8..8,
    )
        .prop_map(
            |(pack, mandate, genuine, cross, action, base, variant, args, extra, approvals)| Move {
                pack,
                mandate,
                genuine,
                cross,
                action,
                base,
                variant,
                args,
                extra_top_level: extra,
                approvals,
            },
        )
}

pub(crate) fn moves(packs: Range<usize>) -> impl Strategy<Value = Vec<Move>> {
    proptest::collection::vec(a_move(packs), PER_CASE..=PER_CASE)
}

/// Everything a move is made from, built once.
pub(crate) struct Ctx {
    pub(crate) truth: Truth,
    pub(crate) pools: Vec<Pool>,
    pub(crate) values: Vec<Vec<Value>>,
}

pub(crate) fn ctx() -> &'static Ctx {
    static C: OnceLock<Ctx> = OnceLock::new();
    C.get_or_init(|| Ctx {
        truth: truth(),
        pools: pools(world()),
        values: PACKS.iter().map(|p| values(p)).collect(),
    })
}

impl Ctx {
    pub(crate) fn all(&self) -> impl Iterator<Item = &M> {
        self.pools.iter().flat_map(|p| p.ms.iter())
    }
}

/// The proposal a move makes, and the mandate it travels with.
pub(crate) fn proposal_of<'a>(c: &'a Ctx, mv: &Move) -> (&'a M, Value) {
    let pack = mv.pack % PACKS.len();
    let p = &c.pools[pack];
    let m = if mv.cross {
        let all: Vec<&M> = c.all().collect();
        all[mv.mandate % all.len()]
    } else if mv.genuine {
        &p.ms[mv.mandate % p.genuine]
    } else {
        &p.ms[mv.mandate % p.ms.len()]
    };
    let action = if mv.action < 200 {
        let a = pack_actions(PACKS[pack]);
        a[mv.action as usize % a.len()]
    } else {
        actions()[mv.action as usize % actions().len()]
    };
    let mut args = if mv.base {
        base_args(action, mv.variant)
    } else {
        Map::new()
    };
    let vals = &c.values[pack];
    for (k, own, v) in &mv.args {
        let key = if *own {
            let ps = own_params(action);
            ps[*k % ps.len()]
        } else {
            PARAMS[*k % PARAMS.len()]
        };
        args.insert(key.to_string(), vals[*v % vals.len()].clone());
    }
    let mut proposal = json!({"action": action, "args": args});
    if mv.extra_top_level {
        proposal["approval_level"] = json!(2);
    }
    (m, proposal)
}
