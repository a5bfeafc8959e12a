"""The OpenAPI schema (/api/schema/, Swagger UI at /api/docs/) in the reader's language: an operation is described by
its `extend_schema(description=...)`, else by its view's `api_description`; both are lazily translated messages,
so the schema is generated in the language of the request (the user's, or `?lang=`). Docstrings stay for developers.
"""

from drf_spectacular.openapi import AutoSchema


class PortalAutoSchema(AutoSchema):
    def get_description(self) -> str:
        described = getattr(self.view, "api_description", None)
        return str(described) if described is not None else super().get_description()
