"""Reading and writing: line readers, TREC formats, collections, the results folder, caches, downloads."""
