package store // no doc comment, and an import of net/http

import _ "net/http"
