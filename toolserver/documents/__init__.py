"""Document page retrieval: ingestion of PDFs and page-image folders, rankings, and the page store.

No HTTP here: `toolserver.api` and the CLI are adapters over `DocumentLibrary`.
"""
