"""The page's Plotly figures: acceptance and speedup (``figures``), theory against measurement
(``theory``), their look (``style``), the benchmark's (``bench``)."""
