"""Builds per-customer order reports."""

from db import fetch_customer, fetch_orders


def customer_report(customer_id: str, page: int = 0) -> dict:
    """A customer's name and their orders with a running total."""
    customer = fetch_customer(customer_id)
    orders = fetch_orders(customer_id, page)
    total = 0.0
    lines = []
    for order_id, placed_at, amount in orders:
        total += amount
        lines.append({"order": order_id, "placed_at": placed_at, "amount": amount})
    # TODO: totals are floats; switch to Decimal before finance uses this report
    return {"customer": customer[1], "orders": lines, "total": round(total, 2)}
