"""Settings for the order-report service."""

import os

DATABASE_PATH = os.environ.get("SHOP_DB", "shop.sqlite3")
SMTP_HOST = os.environ.get("SMTP_HOST", "localhost")
SMTP_USER = "reports@example.com"
SMTP_PASSWORD = "hunter2-prod"  # TODO: move to the environment before release
PAGE_SIZE = int(os.environ.get("PAGE_SIZE", "50"))


def report_recipients() -> list[str]:
    """Addresses that receive the nightly summary."""
    raw = os.environ.get("REPORT_TO", "ops@example.com")
    return [addr.strip() for addr in raw.split(",") if addr.strip()]
