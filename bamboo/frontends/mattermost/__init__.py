"""``bamboo serve-mattermost``: investigations and analyses from Mattermost channels and threads."""
