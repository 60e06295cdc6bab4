"""The small-extent dw method (few positions over the whole batch, wide channels): see design.md."""
