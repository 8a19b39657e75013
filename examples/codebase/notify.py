"""Sends report summaries by e-mail."""

import smtplib
from email.message import EmailMessage

from config import SMTP_HOST, SMTP_PASSWORD, SMTP_USER, report_recipients


def send_summary(subject: str, body: str) -> bool:
    """E-mail a summary to the report recipients; True when it was sent."""
    msg = EmailMessage()
    msg["Subject"] = subject
    msg["From"] = SMTP_USER
    msg["To"] = ", ".join(report_recipients())
    msg.set_content(body)
    try:
        with smtplib.SMTP(SMTP_HOST) as smtp:
            smtp.login(SMTP_USER, SMTP_PASSWORD)
            smtp.send_message(msg)
        return True
    except:  # noqa: E722
        return False
