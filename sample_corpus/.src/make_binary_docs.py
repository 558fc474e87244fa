"""Regenerate the binary documents of the sample corpus.

Outputs (paths relative to sample_corpus/):
  policies/refund-policy.docx   (python-docx)
  release-notes.pdf             (fpdf2, core Helvetica font, English only)

Run from anywhere:  python sample_corpus/.src/make_binary_docs.py
Output is deterministic apart from the timestamps python-docx/fpdf2 embed.
"""
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # sample_corpus/


# --------------------------------------------------------------------------
# DOCX: regional refund policy (with a policy change over time)
# --------------------------------------------------------------------------
def make_refund_docx(path: Path) -> None:
    from docx import Document

    doc = Document()
    doc.core_properties.title = "Tidewater Sync Regional Refund Policy"
    doc.core_properties.author = "Tidewater Sync Billing"

    doc.add_heading("Tidewater Sync Regional Refund Policy", level=1)
    doc.add_paragraph(
        "This policy explains when a purchase of a Tidewater Sync plan can be refunded. "
        "The rules depend on the billing region of the workspace and on the date of purchase. "
        "Several regions changed their rules over time; a purchase is always judged by the rule "
        "that was in force on the day the order was placed, not by the rule in force today."
    )
    doc.add_paragraph(
        "Version 4 of this policy, effective 2025-03-01. It replaces version 3, which was "
        "effective from 2024-10-01 until 2025-02-28."
    )

    doc.add_heading("General rules", level=1)
    doc.add_paragraph(
        "A refund is requested by the workspace Owner in the web console under Settings > Billing > "
        "Orders, or by contacting support with the order number. Approved refunds are paid to the "
        "original payment method within 10 business days."
    )
    doc.add_paragraph(
        "Seat packs and storage add-ons follow the refund window of the region in which they were bought. "
        "Workspaces closed for abuse of the acceptable use policy are not eligible for any refund. "
        "When a full refund is issued, the plan ends immediately and the workspace drops to the Free plan; "
        "files above the Free plan storage limit become read-only."
    )

    doc.add_heading("Regional rules", level=1)

    doc.add_heading("European Union and EEA", level=2)
    doc.add_paragraph(
        "For purchases made before 2025-03-01, customers in the European Union and the EEA could cancel "
        "within 14 days of purchase and receive a full refund. "
        "For purchases made on or after 2025-03-01, the withdrawal period is 30 days from purchase, "
        "for both monthly and annual plans. The longer period applies automatically; no request form is needed."
    )
    doc.add_paragraph(
        "Business customers in the EU who provided a VAT number are covered by the same window."
    )

    doc.add_heading("United Kingdom", level=2)
    doc.add_paragraph(
        "Customers in the United Kingdom may cancel within 14 days of purchase for a full refund. "
        "This rule has not changed since the policy was first published."
    )

    doc.add_heading("United States and Canada", level=2)
    doc.add_paragraph(
        "Annual plans bought in the United States or Canada can be refunded in full within 30 days of purchase. "
        "Until 2024-06-30, monthly plans could also be refunded within their first month. "
        "Since 2024-07-01, monthly plans are no longer refundable; cancelling a monthly plan stops the next renewal only."
    )

    doc.add_heading("Asia-Pacific (excluding Mainland China)", level=2)
    doc.add_paragraph(
        "For purchases made before 2024-10-01, the refund window in Asia-Pacific was 7 days. "
        "From 2024-10-01 the window is 14 days from purchase. This covers Japan, South Korea, "
        "Singapore, Australia, New Zealand, India and the other APAC markets served directly."
    )

    doc.add_heading("Mainland China", level=2)
    doc.add_paragraph(
        "Plans in Mainland China are sold by a local partner and their order numbers start with TWC. "
        "A full refund is available within 7 days of purchase. After 7 days, only the fees for unused seats "
        "are refunded. Refunds are paid in CNY to the original payment method. "
        "The Mainland China rule has not changed since 2023."
    )

    doc.add_heading("Summary table", level=1)
    rows = [
        ("Region", "Purchases before", "Window before", "Purchases from", "Window now"),
        ("European Union and EEA", "2025-03-01", "14 days", "2025-03-01", "30 days"),
        ("United Kingdom", "-", "14 days", "-", "14 days"),
        ("US and Canada, annual plans", "-", "30 days", "-", "30 days"),
        ("US and Canada, monthly plans", "2024-07-01", "first month", "2024-07-01", "not refundable"),
        ("Asia-Pacific excluding China", "2024-10-01", "7 days", "2024-10-01", "14 days"),
        ("Mainland China", "-", "7 days", "-", "7 days, then unused seats only"),
    ]
    table = doc.add_table(rows=len(rows), cols=len(rows[0]))
    table.style = "Table Grid"
    for r, row in enumerate(rows):
        for c, text in enumerate(row):
            table.cell(r, c).text = text

    doc.add_heading("Change history", level=1)
    doc.add_paragraph(
        "Version 4 (2025-03-01): EU and EEA window extended from 14 to 30 days."
    )
    doc.add_paragraph(
        "Version 3 (2024-10-01): Asia-Pacific window extended from 7 to 14 days."
    )
    doc.add_paragraph(
        "Version 2 (2024-07-01): monthly plans in the US and Canada became non-refundable."
    )
    doc.add_paragraph("Version 1 (2023-05-15): first published policy.")

    path.parent.mkdir(parents=True, exist_ok=True)
    doc.save(path)


# --------------------------------------------------------------------------
# PDF: release notes, one or two versions per page
# --------------------------------------------------------------------------
RELEASES = [
    # (page, version, date, [(section, [bullets])])
    (1, "3.5.0", "2025-03-10", [
        ("New", [
            "The offline journal now holds up to 250,000 pending operations (previously 100,000).",
            "Automatic user provisioning with SCIM 2.0 for Enterprise workspaces.",
            "POST /v2/tokens/rotate keeps the old token valid for 5 minutes after rotation.",
            "The server can keep file blocks on a local POSIX volume as well as on S3.",
        ]),
        ("Changed", [
            "Windows 10 builds older than 19045 are no longer supported.",
            "The support bundle now includes index statistics.",
        ]),
        ("Deprecated", [
            "tw_client.refresh() is deprecated; use tw_client.rotate_token() instead.",
            "tw_client.refresh() will be removed in release 3.7.0.",
        ]),
        ("Known issues", [
            "On Windows computers that also run OneDrive, placeholder icons can appear twice.",
            "Renaming a folder while offline can show a stale name until the next scan.",
        ]),
        ("Upgrade notes", [
            "The server migration to 3.5.0 adds an index to the revisions table.",
            "On databases with more than 50 million revisions the migration can take an hour.",
            "Agents of release 3.4 keep working against a 3.5.0 server without changes.",
        ]),
    ]),
    (2, "3.4.1", "2024-11-18", [
        ("Fixed", [
            "A false TW-E2203 error after waking from sleep on macOS 12.",
            "A memory leak when the offline journal grew beyond 50,000 items.",
            "Security: revoked share links could stay cached for up to 1 hour.",
            "The security fix for revoked share links is advisory TW-SA-2024-07.",
        ]),
        ("Known issues", [
            "No new known issues. Upgrade is recommended for all 3.4.0 installations.",
        ]),
    ]),
    (2, "3.4.0", "2024-10-21", [
        ("Removed", [
            "API v1 was removed in 3.4.0; every /v1/ path now returns HTTP 410 Gone.",
            "Support for Ubuntu 20.04 was dropped.",
            "Webhook deliveries no longer send the X-TW-Token shared secret header.",
        ]),
        ("New", [
            "Webhook deliveries are signed with HMAC-SHA256 in the X-TW-Signature header.",
            "New server setting server.max_upload_gb limits the largest accepted file.",
            "New endpoint DELETE /v2/shares/{share_id} revokes a share link.",
        ]),
        ("Known issues", [
            "After waking from sleep on macOS 12, the agent may wrongly report TW-E2203.",
            "This macOS 12 sleep issue is fixed in 3.4.1.",
        ]),
    ]),
    (3, "3.3.1", "2024-07-15", [
        ("Fixed", [
            "Conflicted copies were sometimes created for files that only changed their timestamp.",
            "The agent ignored proxy.no_proxy entries that started with a dot.",
            "Smart placeholders could not be opened from the macOS Finder preview pane.",
        ]),
        ("Changed", [
            "The keep-alive heartbeat interval is now fixed at 30 seconds.",
        ]),
    ]),
    (3, "3.3.0", "2024-06-03", [
        ("New", [
            "Automatic bandwidth throttling based on round-trip times.",
            "Metered connections are detected; large files wait for an unmetered network.",
            "Python client tidewater-client 2.0 with tw_client.wait_for_job().",
        ]),
        ("Changed", [
            "The default of sync.chunk_size_kb was raised from 1024 to 4096.",
            "Log files are now rotated at 20 MB instead of 50 MB.",
        ]),
        ("Deprecated", [
            "The digest value of proxy.auth_mode is deprecated and was removed in 3.4.0.",
        ]),
        ("Known issues", [
            "On Fedora 40 with GNOME, the tray icon is missing unless AppIndicator support is installed.",
        ]),
    ]),
    (4, "3.2.0", "2024-02-12", [
        ("New", [
            "Redesigned Selective Sync panel with folder sizes.",
            "Smart placeholders on macOS (Windows already had them).",
            "New endpoint GET /v2/usage returns storage and seat usage.",
        ]),
        ("Deprecated", [
            "API v1 is deprecated and is scheduled for removal in release 3.4.0.",
        ]),
        ("Known issues", [
            "Uploads of files larger than 20 GB can stall behind some corporate proxies.",
            "Workaround: lower sync.chunk_size_kb to 1024 on the affected computers.",
        ]),
        ("Upgrade notes", [
            "3.2.0 is the oldest release from which later servers can migrate a database.",
        ]),
    ]),
]

SUPPORT_TEXT = [
    "Each minor release receives security fixes for 12 months after its release date.",
    "Release 3.2 reaches end of support on 2025-02-12.",
    "Release 3.3 reaches end of support on 2025-06-03.",
    "Release 3.4 reaches end of support on 2025-10-21.",
    "Release 3.5 reaches end of support on 2026-03-10.",
    "Agents may be one minor release behind the server; an agent newer than the server cannot connect.",
    "Always upgrade the server before upgrading the desktop agents.",
]


def make_release_pdf(path: Path) -> None:
    from fpdf import FPDF

    class PDF(FPDF):
        def footer(self):
            self.set_y(-15)
            self.set_font("Helvetica", size=9)
            self.cell(0, 10, f"Tidewater Sync release notes - page {self.page_no()} of {{nb}}", align="C")

    pdf = PDF(format="A4")
    pdf.set_title("Tidewater Sync Release Notes")
    pdf.set_author("Tidewater Sync Engineering")
    pdf.set_creation_date(__import__("datetime").datetime(2025, 3, 10, tzinfo=__import__("datetime").timezone.utc))
    pdf.alias_nb_pages()
    pdf.set_auto_page_break(auto=True, margin=20)
    width = 0  # full width

    def para(text, size=11, style="", h=6):
        pdf.set_font("Helvetica", style=style, size=size)
        pdf.multi_cell(width, h, text, new_x="LMARGIN", new_y="NEXT")

    current_page = 0
    for page, version, date, sections in RELEASES:
        if page != current_page:
            pdf.add_page()
            current_page = page
            if page == 1:
                para("Tidewater Sync Release Notes", size=20, style="B", h=10)
                para("These notes list the changes in each release of the Tidewater Sync desktop agent, "
                     "the self-hosted server and the REST API. Releases are listed newest first.")
                pdf.ln(4)
        else:
            pdf.ln(6)
        para(f"Release {version}", size=16, style="B", h=9)
        para(f"Released on {date}.", size=10, h=5)
        for name, bullets in sections:
            pdf.ln(2)
            para(name, size=12, style="B", h=7)
            for b in bullets:
                para(f"- {b}")
    pdf.ln(6)
    para("Support lifecycle", size=16, style="B", h=9)
    for line in SUPPORT_TEXT:
        para(line)
    pdf.ln(4)
    para("Upgrade path", size=12, style="B", h=7)
    para("Servers older than 3.2.0 must first be upgraded to 3.2.0, because later releases can only migrate "
         "databases created by 3.2.0 or newer. Back up the database before every upgrade.")
    path.parent.mkdir(parents=True, exist_ok=True)
    pdf.output(str(path))


if __name__ == "__main__":
    make_refund_docx(ROOT / "policies" / "refund-policy.docx")
    make_release_pdf(ROOT / "release-notes.pdf")
    print("wrote", ROOT / "policies" / "refund-policy.docx")
    print("wrote", ROOT / "release-notes.pdf")
