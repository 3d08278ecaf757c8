"""Shell commands over the analyses: ``perfkit diagnose|whatif|pop|scaling|compare`` (``analyses``),
their tables rendered as aligned text, markdown, JSON or CSV (``render``)."""
