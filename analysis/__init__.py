"""analysis — the research harness: the paper's claims and their verdicts over seeds (claims), the per-footing rule
(footing), forgetting at matched gain and the KL law (frontier), the committed results' archives (archive). It reads
finished runs; tools/ runs it over the committed families, and nothing a run imports comes from here."""
