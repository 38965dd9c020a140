"""One router per resource: sessions, tools, documents, inspection, operations."""
