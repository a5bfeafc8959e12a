"""A watch response for the watch tests: one JSON event per line, as the apiserver streams them."""

import json


class Stream:
    def __init__(self, events: list[dict]):
        self.body = "".join(json.dumps(event) + "\n" for event in events).encode()

    def stream(self, amt=None, decode_content=False):
        yield self.body

    def close(self):
        pass

    def release_conn(self):
        pass
