"""Services own transactions and turn rows into API models; routers call exactly one of them."""
