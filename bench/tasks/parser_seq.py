"""The `parser` task run sentence by sentence (no batched_map): what DyNet has to do."""
from bench.tasks import parser as _parser
from bench.tasks.parser import data, uas  # noqa: F401

TITLE = "Arc-hybrid parser, sentence by sentence"


class Model(_parser.Model):
    batched = False
