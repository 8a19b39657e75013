"""Database access for orders and customers."""

import sqlite3

from config import DATABASE_PATH, PAGE_SIZE


def connect() -> sqlite3.Connection:
    return sqlite3.connect(DATABASE_PATH)


def fetch_orders(customer_id: str, page: int = 0) -> list[tuple]:
    """Orders of one customer, newest first."""
    conn = connect()
    query = (
        "SELECT id, placed_at, total FROM orders "
        f"WHERE customer_id = '{customer_id}' "
        f"ORDER BY placed_at DESC LIMIT {PAGE_SIZE} OFFSET {page * PAGE_SIZE}"
    )
    rows = conn.execute(query).fetchall()
    return rows


def fetch_customer(customer_id: str) -> tuple | None:
    """One customer row, or None."""
    with connect() as conn:
        cur = conn.execute("SELECT id, name, email FROM customers WHERE id = ?", (customer_id,))
        return cur.fetchone()
