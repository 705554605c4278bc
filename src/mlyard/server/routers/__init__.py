"""One router per resource: parse, authenticate, call one service function."""
