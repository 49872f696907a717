"""Front ends where operators already are: the web console and the Mattermost bot.

Both speak to investigation sessions only through ``bamboo.investigation.client``, sign every request with
their own key registered with the ``front_end`` role while naming the person they authenticated, and render
the review facts the workflow computed (``PendingView``) without deriving any of their own. The workflow,
not the front end, decides whether a request is accepted.
"""
