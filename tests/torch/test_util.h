// Small helpers shared by the LibTorch tests.
#pragma once

#include <gtest/gtest.h>

#include <string>

/// Runs `stmt` and checks that it throws a std::exception whose message contains `text`.
#define EXPECT_THROW_WITH(stmt, text)                                                  \
  do {                                                                                 \
    try {                                                                              \
      stmt;                                                                            \
      ADD_FAILURE() << "expected an exception containing: " << (text);                 \
    } catch (const std::exception& e) {                                                \
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos)                   \
          << "message was: " << e.what();                                              \
    }                                                                                  \
  } while (false)
