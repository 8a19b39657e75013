"""HTTP entry point: GET /report?customer=<id>&page=<n>."""

from http.server import BaseHTTPRequestHandler, HTTPServer
from json import dumps
from urllib.parse import parse_qs, urlparse

from notify import send_summary
from reports import customer_report


class ReportHandler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        params = parse_qs(urlparse(self.path).query)
        customer_id = params.get("customer", [""])[0]
        page = int(params.get("page", ["0"])[0])
        report = customer_report(customer_id, page)
        body = dumps(report).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)
        send_summary(f"Report viewed: {customer_id}", body.decode())


def main() -> None:
    HTTPServer(("0.0.0.0", 8080), ReportHandler).serve_forever()


if __name__ == "__main__":
    main()
