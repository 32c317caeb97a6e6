"""The NOC's own decisions that shape paging: planned maintenance, raised bars, and
whether every configured outside part answers (``noc check``).
"""
