"""Prompt templates (jinja2, ``StrictUndefined``): all wording sent to a language model lives
here, apart from the code that fills it in."""
