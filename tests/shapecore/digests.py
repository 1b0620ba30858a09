"""Knowledge digests of fact lists, for the tests of the layers that read them."""

from shapecore.knowledge import Knowledge


def knowledge_of(facts):
    """A Knowledge with ``facts`` added in order."""
    knowledge = Knowledge()
    for fact in facts:
        knowledge.add(fact)
    return knowledge
