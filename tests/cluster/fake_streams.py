"""A watch response for the watch tests: one JSON event per line, as the apiserver streams them."""

import json
import time


class Stream:
    def __init__(self, events: list[dict]):
        self.body = "".join(json.dumps(event) + "\n" for event in events).encode()

    def stream(self, amt=None, decode_content=False):
        yield self.body

    def close(self):
        pass

    def release_conn(self):
        pass


class PacedStream(Stream):
    """Events sent as the apiserver sends a steady stream: each after its own pause (seconds) from the one before."""

    def __init__(self, paced: list[tuple[float, dict]]):
        super().__init__([])
        self.paced = paced

    def stream(self, amt=None, decode_content=False):
        for pause, event in self.paced:
            time.sleep(pause)
            yield (json.dumps(event) + "\n").encode()
