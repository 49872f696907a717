"""Routing reads a bounded part of a task's splitRule and task_creation_arguments, as it
reads errorDialog: one malformed file must not become thousands of features, or work sized by the input."""

from __future__ import annotations

from bamboo.extraction.panda.routing import MAX_DIALOG_SCAN, MAX_SPLIT_PARTS, route_task_data, split_rule_parts

KEY = b"k"


def _split_features(clues) -> list[str]:
    return [f.name for f in clues.features if f.name.startswith("splitRule:")]


def test_a_split_rule_of_many_parts_gives_at_most_the_cap_and_says_so():
    rule = ",".join(f"X{i}=1" for i in range(20_000))
    clues = route_task_data({"status": "broken", "splitRule": rule}, KEY)
    assert _split_features(clues) == [f"splitRule:X{i}=1" for i in range(MAX_SPLIT_PARTS)]
    assert [s for s in clues.skipped if s.startswith("splitRule")] == [
        f"splitRule: more than {MAX_SPLIT_PARTS} parts; only the first {MAX_SPLIT_PARTS} are read"]


def test_a_long_split_rule_is_read_only_within_its_head_and_no_part_is_cut_short():
    rule = "nG=1,mF=1,XX=" + "9" * (MAX_DIALOG_SCAN * 3) + ",late=1"
    clues = route_task_data({"splitRule": rule}, KEY)
    assert _split_features(clues) == ["splitRule:nG=1", "splitRule:mF=1"]
    assert clues.skipped == [f"splitRule: longer than {MAX_DIALOG_SCAN} characters; only the parts within them are read"]
    # A head that ends exactly at a comma keeps its last part: it is whole.
    exact = "a=" + "1" * (MAX_DIALOG_SCAN - 2) + ",b=2"
    assert split_rule_parts(exact)[0] == ["a=" + "1" * (MAX_DIALOG_SCAN - 2)]


def test_a_real_split_rule_is_read_whole():
    rule = "AI=1,CC=1,DM=1,EC=1,FD=1,GN=4,LF=1,MI=1,NF=1,NG=1,NS=1,PA=1,RD=1,SC=1,SI=1,TO=1,UI=1,WQ=1"
    clues = route_task_data({"splitRule": rule}, KEY)
    assert len(_split_features(clues)) == rule.count(",") + 1 and clues.skipped == []


def test_task_creation_arguments_are_read_only_within_their_head():
    huge = route_task_data({"task_creation_arguments": "prun --exec " + "x " * 500_000}, KEY)
    assert [c.name for c in huge.components] == ["prun"]
    late = route_task_data({"task_creation_arguments": " " * (MAX_DIALOG_SCAN + 10) + "prun --exec x"}, KEY)
    assert late.components == []
    assert late.skipped == [f"task_creation_arguments: no command in its first {MAX_DIALOG_SCAN} characters"]
