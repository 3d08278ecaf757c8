"""Real MPI applications from Debian, as users run them: small inputs made here, command lines, and parsers of
the applications' own timers (the truth perfkit's profiles are checked against)."""
