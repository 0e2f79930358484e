package nftconn

import "github.com/nodelocaldns/nodelocaldns/internal/nft/nlsock"

// RequestTimeout bounds every request on our sockets ([nlsock.RequestTimeout]).
const RequestTimeout = nlsock.RequestTimeout
