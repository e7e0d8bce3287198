"""Firestore's rules for a document or collection id, for the template's functions: the
library's own (`dedup.platform.document_ids`), which the Firestore kind's boundary checks also
use."""

from dedup.platform.document_ids import MAX_ID_BYTES, id_problem, is_document_id

__all__ = ["MAX_ID_BYTES", "id_problem", "is_document_id"]
