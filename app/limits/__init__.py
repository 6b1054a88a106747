"""What one request may do: the work each job asks for and what the page does when it is more than is left
(``work``), the request's ledger and the server's heavy-job slots (``ledger``), the caches' byte budget (``budget``),
and reading a file that may be planted, never past a bound (``safe_read``). Above ``app.models`` (public mode sets
the ceilings), below the analyses that count against it."""
