"""The text layers a batch pass sent, kept until their answers are gated.

The gate checks an answer's evidence against the text layer of the document it answers. A batch
answer comes back long after its request was built, so without this the router reads, hashes and
parses every document a second time (an HTML file: a round trip through a reader process) just to
gate its answer. `SentTexts` keeps the `Content` a request was built from in a temporary file (one
int per document in memory: its place, in a `DigestMap`), and the gate takes it from there.

Only a document sent as plain text is kept (no PDF or image bytes, no e-mail attachments), and only
the first `MOST` of a pass: a batch of more answers is gated in worker processes
(tasks.batch.ingest), which read their documents themselves. A document not kept (or a resumed
run's, whose file is gone with its process) is read again, as before. The text kept is what was
sent, so the gate proves the answer against what the model saw, even when the file has changed since.
"""

from __future__ import annotations

import pickle
import threading

from checkpoints.outcomes_places import DigestMap, Spill, digest
from tasks.batch.ingest import MIN_RESULTS
from tasks.request import Payload, SendAs

MOST = MIN_RESULTS  # documents kept a pass: beyond, answers are gated in worker processes


class SentTexts:
    """custom_id -> the Content its first request was built from (thread-safe: requests are built
    in a pool of threads, answers gated in another)."""

    def __init__(self, most: int = MOST) -> None:
        self.most = most
        self.places = DigestMap()
        self.spill = Spill("docmill-sent-")
        self.lock = threading.Lock()

    def close(self) -> None:
        """Forget every text (a later `payload` is None: the document is read again)."""
        with self.lock:
            self.places = DigestMap()
            self.spill.close()

    def keep(self, custom_id: str, payload: Payload) -> None:
        """Keep the text layer `payload` sent as text (anything else is not kept)."""
        content = payload.content
        if payload.send is not SendAs.TEXT or payload.pdf is not None or content.media_type or content.parts:
            return
        data = pickle.dumps(content, protocol=pickle.HIGHEST_PROTOCOL)
        with self.lock:
            if len(self.places) >= self.most or self.spill.closed:
                return
            self.places[digest(custom_id)] = self.spill.put(data)

    def payload(self, custom_id: str) -> Payload | None:
        """The payload kept for `custom_id`, or None."""
        with self.lock:
            place = self.places.get(digest(custom_id))
            if place is None:
                return None
            data = self.spill.get(place)
        content = pickle.loads(data)
        return Payload(content.text, content)
